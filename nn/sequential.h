// Sequential: children run in order; they are named "0", "1", ... so that state_dict keys match the
// equivalent torch.nn.Sequential ("0.weight", "2.bias").
//
//   nn::Sequential net(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
//   Tensor y = net(x);
#pragma once

#include <memory>
#include <string>
#include <type_traits>

#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

// A module, a holder of one, or a shared pointer to one, as the shared pointer containers keep.
template <typename M>
std::shared_ptr<Module> as_module_ptr(M&& m) {
  if constexpr (requires { m.ptr(); }) {
    return m.ptr();
  } else {
    if (m) m->template bind_forward<typename std::decay_t<M>::element_type>();
    return std::shared_ptr<Module>(std::forward<M>(m));
  }
}

class SequentialImpl : public Module {
 public:
  SequentialImpl() : Module("Sequential") {}
  template <typename... M>
    requires(sizeof...(M) > 0)
  explicit SequentialImpl(M&&... modules) : Module("Sequential") {
    (push_back(as_module_ptr(std::forward<M>(modules))), ...);
  }
  void push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size_), std::move(m)), ++size_; }
  // A module by its own type: binds its Tensor forward (module.h) for forward() to call.
  template <typename M>
    requires(!std::is_same_v<M, Module>)
  void push_back(std::shared_ptr<M> m) {
    push_back(as_module_ptr(std::move(m)));
  }
  template <typename H>
    requires requires(const H& h) { h.ptr(); }
  void push_back(const H& holder) {
    push_back(std::shared_ptr<Module>(holder.ptr()));
  }
  size_t size() const { return size_; }
  std::shared_ptr<Module> operator[](size_t i) const {
    LOCKSTEP_CHECK(i < size_, "Sequential: index ", i, " out of range for ", size_, " modules");
    return named_children()[i].second;
  }
  Tensor forward(const Tensor& input) {
    Tensor x = input;
    for (auto& [_, m] : named_children()) x = m->forward(x);
    return x;
  }

 private:
  size_t size_ = 0;
};
LOCKSTEP_MODULE(Sequential);

}  // namespace lockstep::nn
