// Adagrad (adagrad.h states the rule): one fused pass per parameter, tensor/optim_step.h's adagrad_update
// (_single_tensor_adagrad's ops in their order).
#include "optim/adagrad.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/optim_step.h"

namespace lockstep::optim {

void AdagradOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  check_non_negative(who, "lr_decay", lr_decay_);
  check_non_negative(who, "weight_decay", weight_decay_);
  check_non_negative(who, "initial_accumulator_value", initial_accumulator_value_);
  check_non_negative(who, "epsilon", eps_);
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : OptimizerWithOptions("Adagrad", {{std::move(params), options}}, options) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "Adagrad: got an empty parameter list");
  for (size_t i = 0; i < this->params(0).size(); ++i) init_state(i, this->params(0)[i]);
}

Adagrad::Adagrad(std::vector<ParamGroup> groups)
    : OptimizerWithOptions("Adagrad", groups, groups.empty() ? AdagradOptions() : groups[0].options) {
  const std::vector<Tensor> all = params();
  for (size_t i = 0; i < all.size(); ++i) init_state(i, all[i]);
}

// PyTorch fills every sum with the constructor's initial_accumulator_value (self.defaults), in __init__
// and in the lazy path alike, so a group's own value never reaches the state.
void Adagrad::init_state(size_t index, const Tensor& param) {
  auto& s = mutable_state(index);
  s["step"] = make_step_tensor(0);
  s["sum"] = full_like(param, defaults().initial_accumulator_value());
}

void Adagrad::step() {
  using namespace internal;
  NoGradGuard no_grad;
  size_t i = 0;
  for (size_t group = 0; group < num_param_groups(); ++group) {
    const AdagradOptions& o = options(group);
    for (const Tensor& param : params(group)) {
      const size_t index = i++;
      if (!param.grad().defined()) continue;
      if (state(index).empty()) init_state(index, param);  // a group added after construction
      auto& s = mutable_state(index);
      increment_step(s["step"]);
      const double step = step_of(s["step"]);
      Tensor p = param, sum = s["sum"];
      OptimStepArgs args;
      args.lr = o.lr() / (1 + (step - 1) * o.lr_decay());  // clr
      args.eps = o.eps(), args.weight_decay = o.weight_decay(), args.maximize = o.maximize();
      // One fused pass (tensor/optim_step.h's adagrad_update); a state loaded in another dtype is cast first.
      if (sum.dtype() != p.dtype() || !sum.is_contiguous()) sum = s["sum"] = contiguous(to_dtype(sum, p.dtype()));
      optim_step_(OptimRule::Adagrad, p, contiguous(param.grad()), {&sum, nullptr, nullptr}, args);
    }
  }
}

}  // namespace lockstep::optim
