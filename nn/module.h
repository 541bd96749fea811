// Module: the base of every layer and model, as torch.nn.Module. Parameters, buffers and children
// live in ordered, named lists, so parameters() has one order on every rank (the order DDP's
// buckets rely on) and named_parameters() gives PyTorch's dotted names ("fc.weight", "0.bias").
//
// Modules are held by std::shared_ptr, usually through a ModuleHolder (nn/module_holder.h: `nn::Linear`
// holds a `LinearImpl`); a child registered with register_module is shared with the field the model
// keeps for it. Parameters are Tensor handles: to(device) rewrites their data in place
// (Tensor::set_data), so handles kept in fields stay valid.
//
// forward: as in LibTorch, forward is not virtual and a module declares it with any arguments and
// results (no `override`):
//   Tensor forward(const Tensor& x);                                        // Linear, user MLPs
//   std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& x);            // a VAE: recon, mu, logvar
//   std::pair<Tensor, Tensor> forward(const Tensor& idx, const Tensor& targets);   // GPT: logits, loss
// A holder's operator() and DistributedDataParallel::forward<M>(...) call whichever forward the arguments
// select, whatever it returns. Module::forward(input) on a std::shared_ptr<Module> (Sequential, ModuleList
// loops, ddp->forward(x)) runs the module's own `Tensor forward(const Tensor&)`, bound from its static type
// when the module is made by a holder, registered (register_module, Sequential, ModuleList, ModuleDict) or
// wrapped by DDP; a module whose forward returns something else is reached through its type instead.
//
// Weight tying: parameters() and named_parameters() yield each tensor once (the first name it was
// registered under), as PyTorch's; state_dict() keeps every name. Tie with register_parameter, which
// replaces a parameter of the same name:
//   lm_head->weight = lm_head->register_parameter("weight", wte->weight);
#pragma once

#include <functional>
#include <iosfwd>
#include <tuple>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module;
// Prints the module tree as PyTorch's print(model) does: the module's line and then, indented, each
// child as "(name): " followed by its own tree. `std::cout << *model` (or `<< model`, a holder).
std::ostream& operator<<(std::ostream& os, const Module& module);

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string name = "Module") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs the module's own `Tensor forward(const Tensor&)` (see above); an error when it has none. Const
  // only so that it never hides or matches a module's forward: the module runs as non-const.
  Tensor forward(const Tensor& input) const;
  Tensor operator()(const Tensor& input) const { return forward(input); }
  // Binds Module::forward to M's `Tensor forward(const Tensor&)` (M: this module's type or a base of it),
  // unless already bound; holders, register_module, the containers and DDP call it.
  template <typename M>
  void bind_forward() {
    static_assert(std::is_base_of_v<Module, M>);
    if constexpr (requires { static_cast<Tensor (M::*)(const Tensor&)>(&M::forward); }) {
      if (!forward_fn_) forward_fn_ = [](Module& m, const Tensor& x) { return static_cast<M&>(m).forward(x); };
    }
  }

  // Forward hooks, as torch.nn.Module's register_forward_pre_hook and register_forward_hook: run around
  // every call of this module through Module::forward(input) or a holder's operator() (a call of the
  // typed forward on the module itself, model->forward(x), runs none). A forward hook sees the output's
  // tensors (a Tensor, or each Tensor of a pair or tuple) and may replace them in place; fully_shard
  // (distributed/fsdp/) gathers a unit's parameters in its pre-hook and frees them in its hook.
  using ForwardPreHook = std::function<void(Module&)>;
  using ForwardHook = std::function<void(Module&, const std::vector<Tensor*>& outputs)>;
  void register_forward_pre_hook(ForwardPreHook hook) { pre_hooks_.push_back(std::move(hook)); }
  void register_forward_hook(ForwardHook hook) { post_hooks_.push_back(std::move(hook)); }
  bool has_forward_hooks() const { return !pre_hooks_.empty() || !post_hooks_.empty(); }
  void run_forward_pre_hooks();
  void run_forward_hooks(const std::vector<Tensor*>& outputs);

  // Each tensor once, in registration order (tied weights are yielded under their first name).
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  // Calls fn on every submodule (depth first, children before their parent) and then on this module, as
  // torch.nn.Module.apply; the usual way to re-initialise a model:
  //   model->apply([](nn::Module& m) { if (auto* l = m.as<nn::Linear>()) nn::init::normal_(l->weight, 0, 0.02); });
  void apply(const std::function<void(Module&)>& fn);
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
  // This module's own line in `os << module` (LibTorch's pretty_print): a layer's name and its options,
  // as `Linear(in_features=4, out_features=2, bias=true)`; by default the name given to the constructor
  // ("Dropout2d()" for a layer without children), or the class name of a user's module ("NetImpl").
  virtual void pretty_print(std::ostream& os) const;
  // This module as T (a Module subclass or a holder's type, as LibTorch's as<T>()); null when it is not.
  template <typename T>
  auto* as() {
    if constexpr (requires { typename T::ContainedType; }) return dynamic_cast<typename T::ContainedType*>(this);
    else return dynamic_cast<T*>(this);
  }

  // Registering a name that is already a parameter replaces that parameter in place (same position):
  // how a weight is tied to another module's.
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    if (m) m->template bind_forward<M>();
    add_child(name, m);
    return m;
  }
  // A holder (nn::Linear, nn::Sequential, ...): fc = register_module("fc", nn::Linear(784, 10)).
  template <typename H>
    requires requires(const H& h) { h.ptr(); }
  H register_module(const std::string& name, H holder) {
    add_child(name, holder.ptr());
    return holder;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name) const;
  void collect(NamedTensors Module::*list, const std::string& prefix, bool recurse, NamedTensors& out) const;
  NamedTensors named_parameters_all(bool recurse) const;  // with duplicates, as state_dict holds them

  std::string name_;
  Tensor (*forward_fn_)(Module&, const Tensor&) = nullptr;  // set by bind_forward
  std::vector<ForwardPreHook> pre_hooks_;
  std::vector<ForwardHook> post_hooks_;
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

namespace detail {
// The tensors of a forward's result, for forward hooks: a Tensor, each Tensor of a pair or tuple;
// nothing for other results.
template <typename R>
std::vector<Tensor*> output_tensors(R& out) {
  if constexpr (std::is_same_v<R, Tensor>) {
    return {&out};
  } else if constexpr (requires { std::tuple_size<R>::value; }) {
    std::vector<Tensor*> ts;
    auto add = [&](auto& e) {
      if constexpr (std::is_same_v<std::decay_t<decltype(e)>, Tensor>) ts.push_back(&e);
    };
    std::apply([&](auto&... e) { (add(e), ...); }, out);
    return ts;
  } else {
    return {};
  }
}
}  // namespace detail

}  // namespace lockstep::nn
