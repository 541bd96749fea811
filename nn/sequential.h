// Sequential: children run in order; they are named "0", "1", ... so that state_dict keys match the
// equivalent torch.nn.Sequential ("0.weight", "2.bias").
#pragma once

#include <initializer_list>

#include "nn/module.h"

namespace lockstep::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Module("Sequential") {
    for (auto& m : modules) push_back(m);
  }
  // std::make_shared<Sequential>(std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), ...)
  template <typename... M>
  explicit Sequential(std::shared_ptr<M>... modules) : Module("Sequential") {
    (push_back(std::move(modules)), ...);
  }
  void push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size_), std::move(m)), ++size_; }
  size_t size() const { return size_; }
  std::shared_ptr<Module> operator[](size_t i) const {
    LOCKSTEP_CHECK(i < size_, "Sequential: index ", i, " out of range for ", size_, " modules");
    return named_children()[i].second;
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = input;
    for (auto& [_, m] : named_children()) x = m->forward(x);
    return x;
  }

 private:
  size_t size_ = 0;
};

}  // namespace lockstep::nn
