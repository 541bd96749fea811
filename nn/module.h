// Module: the base of every layer and model, as torch.nn.Module. Parameters, buffers and children
// live in ordered, named lists, so parameters() has one order on every rank (the order DDP's
// buckets rely on) and named_parameters() gives PyTorch's dotted names ("fc.weight", "0.bias").
//
// Modules are held by std::shared_ptr; a child registered with register_module is shared with the
// field the model keeps for it. Parameters are Tensor handles: to(device) rewrites their data in
// place (Tensor::set_data), so handles kept in fields stay valid.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string name = "Module") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation of single-input modules (Linear, ReLU, Sequential, user models).
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }

  // Parameters then buffers, with dotted names: what a checkpoint holds.
  NamedTensors state_dict() const;
  // Copies values in; names, shapes and dtypes are checked. With strict, missing or unexpected names
  // are errors (as PyTorch); each error names the key.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  void to(Device device);
  void to(Dtype dtype);
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Clears gradients: to undefined (set_to_none, PyTorch's default) or to zeros.
  void zero_grad(bool set_to_none = true);

  const std::string& name() const { return name_; }

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name) const;
  void collect(NamedTensors Module::*list, const std::string& prefix, bool recurse, NamedTensors& out) const;

  std::string name_;
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace lockstep::nn
