// Module: registration, traversal in registration order, state_dict, device moves and modes.
#include "nn/module.h"

#include <ostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "common/type_name.h"
#include "tensor/ops.h"

namespace lockstep::nn {

Tensor Module::forward(const Tensor& input) const {
  LOCKSTEP_CHECK(forward_fn_ != nullptr, name_, ": forward(input) is not implemented: the module declares no "
                 "`Tensor forward(const Tensor&)` (or was never made by a holder, registered or wrapped, which binds "
                 "it); a forward with other arguments or results is called through the module's type: "
                 "model(x), model->forward(x), ddp->forward<M>(x)");
  auto& self = const_cast<Module&>(*this);
  if (!has_forward_hooks()) return forward_fn_(self, input);
  self.run_forward_pre_hooks();
  Tensor out = forward_fn_(self, input);
  self.run_forward_hooks({&out});
  return out;
}

void Module::run_forward_pre_hooks() {
  for (auto& h : pre_hooks_) h(*this);
}

void Module::run_forward_hooks(const std::vector<Tensor*>& outputs) {
  for (auto& h : post_hooks_) h(*this, outputs);
}

void Module::check_new_name(const std::string& name) const {
  LOCKSTEP_CHECK(!name.empty() && name.find('.') == std::string::npos, name_, ": invalid name '", name,
                 "' (must be non-empty and contain no '.')");
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  LOCKSTEP_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), name_, ": name '", name,
                 "' is already registered");
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  LOCKSTEP_CHECK(t.defined(), name_, ": register_parameter('", name, "'): undefined tensor");
  LOCKSTEP_CHECK(t.is_leaf(), name_, ": register_parameter('", name, "'): a parameter must be a leaf tensor "
                 "(create it under NoGradGuard or detach() it)");
  t.set_requires_grad(requires_grad);
  for (auto& [n, p] : params_)
    if (n == name) return p = std::move(t);
  check_new_name(name);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  LOCKSTEP_CHECK(t.defined(), name_, ": register_buffer('", name, "'): undefined tensor");
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name);
  LOCKSTEP_CHECK(m, name_, ": register_module('", name, "'): null module");
  LOCKSTEP_CHECK(m.get() != this, name_, ": register_module('", name, "'): a module cannot contain itself");
  children_.emplace_back(name, std::move(m));
}

void Module::collect(NamedTensors Module::*list, const std::string& prefix, bool recurse, NamedTensors& out) const {
  for (const auto& [n, t] : this->*list) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, child] : children_) child->collect(list, prefix + n + ".", true, out);
}

NamedTensors Module::named_parameters_all(bool recurse) const {
  NamedTensors out;
  collect(&Module::params_, "", recurse, out);
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [n, t] : named_parameters_all(recurse))
    if (seen.insert(t.impl()).second) out.emplace_back(std::move(n), std::move(t));
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect(&Module::buffers_, "", recurse, out);
  return out;
}

static std::vector<Tensor> values(const NamedTensors& named) {
  std::vector<Tensor> v;
  v.reserve(named.size());
  for (const auto& [_, t] : named) v.push_back(t);
  return v;
}

std::vector<Tensor> Module::parameters(bool recurse) const { return values(named_parameters(recurse)); }
std::vector<Tensor> Module::buffers(bool recurse) const { return values(named_buffers(recurse)); }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [_, c] : children_) out.push_back(c);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [_, c] : children_) c->apply(fn);
  fn(*this);
}

void Module::pretty_print(std::ostream& os) const {
  // A user's module keeps the default name: its class name, as LibTorch prints it.
  if (name_ == "Module") os << type_name(typeid(*this));
  else os << name_ << (children_.empty() ? "()" : "");
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  module.pretty_print(os);
  const auto children = module.named_children();
  if (children.empty()) return os;
  os << "(\n";
  for (const auto& [name, child] : children) {
    std::ostringstream sub;
    sub << *child;
    // The child's lines indented by two more spaces.
    std::string text = sub.str(), indented;
    for (char c : text) indented += c == '\n' ? std::string("\n  ") : std::string(1, c);
    os << "  (" << name << "): " << indented << "\n";
  }
  return os << ")";
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters_all(true);
  for (auto& b : named_buffers()) out.push_back(std::move(b));
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) {
    LOCKSTEP_CHECK(given.emplace(n, &t).second, "load_state_dict: key '", n, "' appears twice");
  }
  NamedTensors mine = state_dict();
  NoGradGuard no_grad;
  std::vector<std::string> missing;
  for (auto& [n, t] : mine) {
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
      continue;
    }
    const Tensor& src = *it->second;
    LOCKSTEP_CHECK(src.defined() && src.shape() == t.shape(), "load_state_dict: size mismatch for '", n,
                   "': checkpoint has ", src.defined() ? src.shape() : Shape{}, ", model has ", t.shape());
    LOCKSTEP_CHECK(src.dtype() == t.dtype(), "load_state_dict: dtype mismatch for '", n, "': checkpoint has ",
                   src.dtype(), ", model has ", t.dtype());
    internal::copy_(t, src);
    given.erase(it);
  }
  if (strict) {
    LOCKSTEP_CHECK(missing.empty(), "load_state_dict: missing key(s) in state_dict: ", missing);
    std::vector<std::string> unexpected;
    for (const auto& [n, t] : state)
      if (given.count(n)) unexpected.push_back(n);
    LOCKSTEP_CHECK(unexpected.empty(), "load_state_dict: unexpected key(s) in state_dict: ", unexpected);
  }
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& t : parameters()) {
    if (t.device() == device) continue;
    Tensor grad = t.grad();
    t.set_data(internal::to_device(t, device));
    if (grad.defined()) t.autograd_meta().grad = internal::to_device(grad, device);
  }
  for (auto& b : buffers()) b.set_data(internal::to_device(b, device));
}

void Module::to(Dtype dtype) {
  NoGradGuard no_grad;
  for (auto& t : parameters()) {
    if (t.dtype() == dtype || !is_floating_point(t.dtype())) continue;
    LOCKSTEP_CHECK(is_floating_point(dtype), name_, ".to: parameters must stay floating point, got ", dtype);
    Tensor grad = t.grad();
    t.set_data(internal::to_dtype(t, dtype));
    if (grad.defined()) t.autograd_meta().grad = internal::to_dtype(grad, dtype);
  }
  for (auto& b : buffers())
    if (is_floating_point(b.dtype()) && is_floating_point(dtype)) b.set_data(internal::to_dtype(b, dtype));
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, c] : children_) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (auto& t : parameters()) {
    if (!t.grad().defined()) continue;
    if (set_to_none) t.autograd_meta().grad = Tensor();
    else internal::fill_(t.autograd_meta().grad, 0.0);
  }
}

}  // namespace lockstep::nn
