// Optimizer: the base of lockstep's optimizers, as torch.optim.Optimizer. Parameters come in ordered
// groups, each with its own options (lr, weight_decay, momentum or betas...); per-parameter state
// (momentum buffers, Adam's moments, step counts) is kept by the parameter's index counted across the
// groups in order, PyTorch's numbering in its state_dict.
//
// state_dict() is flat, tensors only, so it saves as safetensors as it is. Its keys are PyTorch's
// optimizer state_dict with dots:
//   state.<i>.<name>              per-parameter state, e.g. state.0.exp_avg, state.0.step (float32 [])
//   param_groups.<g>.<option>     each option: float64 [] (lr, eps...), float64 [2] (betas), bool []
//   param_groups.<g>.params       int64 [n]: the indices of the group's parameters
//   param_groups.<g>.initial_lr   float64 [], once a scheduler has recorded it
// The state tensors in a state_dict are the optimizer's own (as PyTorch's): clone them to keep a
// snapshot while training goes on. load_state_dict copies; it checks that the groups and their sizes
// match and that every state tensor has its parameter's shape, and each error names the optimizer and
// the key.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::optim {

// Named tensors in order (the same type as nn::NamedTensors and lockstep::TensorList).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", "AdamW": the prefix of every error.
  const std::string& name() const { return name_; }

  // Updates every parameter that has a gradient, under NoGradGuard.
  virtual void step() = 0;
  // Clears the gradients of every parameter: to undefined (PyTorch's default) or to zeros.
  void zero_grad(bool set_to_none = true);

  size_t num_param_groups() const { return group_params_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  // Every group's parameters, in order (index i is the i of state.<i>).
  std::vector<Tensor> params() const;
  // A group's learning rate (what schedulers read and write).
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // The lr a scheduler started from (PyTorch's group["initial_lr"]), set by the first scheduler built.
  std::optional<double> initial_lr(size_t group) const;
  void set_initial_lr(size_t group, double lr);

  // Per-parameter state of parameter i by PyTorch's names ("step", "exp_avg", "momentum_buffer"); empty
  // before its first step.
  const std::map<std::string, Tensor>& state(size_t i) const;

  virtual StateDict state_dict() const;
  // Loads options and state saved by state_dict(); tensors are copied to each parameter's device and,
  // except step counts, its dtype. Virtual for LBFGS, whose state is not shaped like its parameters.
  virtual void load_state_dict(const StateDict& state);

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}
  // Adds a group's parameters (checked: defined, leaf, requiring grad, not already in any group).
  void add_params(std::vector<Tensor> params);
  // The state names this optimizer may hold (for checking a loaded state_dict).
  virtual std::vector<std::string> state_names() const = 0;
  // Options of group g as state_dict entries (prefix "param_groups.<g>.") and back; `get` throws for a
  // missing key.
  virtual void save_options(size_t group, const std::string& prefix, StateDict& out) const = 0;
  virtual void load_options(size_t group, const std::map<std::string, Tensor>& entries, const std::string& prefix) = 0;
  // Parameter i's state, created on first use.
  std::map<std::string, Tensor>& mutable_state(size_t i) { return state_.at(i); }
  // The first index of group g's parameters in the flat numbering.
  size_t group_offset(size_t group) const;

 private:
  std::string name_;
  std::vector<std::vector<Tensor>> group_params_;
  std::vector<std::optional<double>> initial_lr_;
  std::vector<std::map<std::string, Tensor>> state_;
};

// The step count kept as state "step": a float32 scalar on the CPU, as PyTorch keeps it.
Tensor make_step_tensor(double step = 0);
double step_of(const Tensor& step);
void increment_step(Tensor& step);
// The options' checks, in PyTorch's words ("Adam: Invalid learning rate: -1"): a learning rate finite
// and at least 0; `what` names another field that must be at least 0 ("epsilon", "weight_decay", ...);
// betas in [0, 1).
void check_lr(const std::string& who, double lr);
void check_non_negative(const std::string& who, const char* what, double value);
void check_betas(const std::string& who, const std::array<double, 2>& betas);

// m.lerp_(x, w), in place, as at::lerp computes it (from m for a small weight, from x otherwise), so
// moving averages round as PyTorch's do.
void lerp_(Tensor& m, const Tensor& x, double w);

// The options part of an optimizer whose options are the struct O: one O per group. O lists its fields
// for the state_dict through `template <class F> void for_each(F&& f)` calling f(name, field) for each
// (double, bool or std::array<double, 2>), and checks itself with `void check(const std::string& who)`.
template <class O>
class OptimizerWithOptions : public Optimizer {
 public:
  struct ParamGroup {
    std::vector<Tensor> params;
    O options;
  };

  // A group with its own options, as torch.optim.Optimizer.add_param_group.
  void add_param_group(std::vector<Tensor> params, O options) {
    options.check(name() + " (param group " + std::to_string(num_param_groups()) + ")");
    add_params(std::move(params));
    options_.push_back(options);
  }
  void add_param_group(ParamGroup group) { add_param_group(std::move(group.params), group.options); }
  // Group g's options (group 0's for a single-group optimizer); writable, as PyTorch's param_groups.
  O& options(size_t group = 0) { return options_.at(group); }
  const O& options(size_t group = 0) const { return options_.at(group); }
  // The options the optimizer was built with.
  const O& defaults() const { return defaults_; }

  double lr(size_t group) const override { return options_.at(group).lr(); }
  void set_lr(size_t group, double lr) override {
    O o = options_.at(group);
    o.lr(lr);
    o.check(name());
    options_.at(group) = o;
  }
  // Sets every group's lr.
  void set_lr(double lr) {
    for (size_t g = 0; g < num_param_groups(); ++g) set_lr(g, lr);
  }

 protected:
  OptimizerWithOptions(std::string name, std::vector<ParamGroup> groups, O defaults)
      : Optimizer(std::move(name)), defaults_(defaults) {
    defaults_.check(this->name());
    LOCKSTEP_CHECK(!groups.empty(), this->name(), ": got an empty parameter list");
    for (auto& g : groups) add_param_group(std::move(g));
  }
  void save_options(size_t group, const std::string& prefix, StateDict& out) const override;
  void load_options(size_t group, const std::map<std::string, Tensor>& entries, const std::string& prefix) override;

 private:
  O defaults_;
  std::vector<O> options_;
};

// --- option <-> tensor conversion, shared by every OptimizerWithOptions ---
namespace detail {
Tensor option_tensor(double v);
Tensor option_tensor(bool v);
Tensor option_tensor(const std::array<double, 2>& v);
const Tensor& find_option(const std::map<std::string, Tensor>& entries, const std::string& key,
                          const std::string& who);
void read_option(const Tensor& t, double& v, const std::string& key, const std::string& who);
void read_option(const Tensor& t, bool& v, const std::string& key, const std::string& who);
void read_option(const Tensor& t, std::array<double, 2>& v, const std::string& key, const std::string& who);
}  // namespace detail

template <class O>
void OptimizerWithOptions<O>::save_options(size_t group, const std::string& prefix, StateDict& out) const {
  O o = options_.at(group);
  o.for_each([&](const char* key, auto& field) { out.emplace_back(prefix + key, detail::option_tensor(field)); });
}

template <class O>
void OptimizerWithOptions<O>::load_options(size_t group, const std::map<std::string, Tensor>& entries,
                                           const std::string& prefix) {
  O o = options_.at(group);
  o.for_each([&](const char* key, auto& field) {
    detail::read_option(detail::find_option(entries, prefix + key, name()), field, prefix + key, name());
  });
  o.check(name() + " (loaded param group " + std::to_string(group) + ")");
  options_.at(group) = o;
}

}  // namespace lockstep::optim
