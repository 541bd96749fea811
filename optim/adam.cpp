// Adam and AdamW (adam.h states the rule) on Backend::adam_step.
#include "optim/adam.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

void AdamOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  check_non_negative(who, "epsilon", eps_);
  check_betas(who, betas_);
  check_non_negative(who, "weight_decay", weight_decay_);
}

namespace {

AdamOptions decoupled(AdamOptions o) { return o.decoupled_weight_decay(true); }

std::vector<Adam::ParamGroup> decoupled(std::vector<Adam::ParamGroup> groups) {
  for (auto& g : groups) g.options = decoupled(g.options);
  return groups;
}

AdamOptions first_options(const std::vector<Adam::ParamGroup>& groups) {
  return groups.empty() ? AdamOptions() : groups[0].options;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam("Adam", {{std::move(params), options}}, options) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "Adam: got an empty parameter list");
}

Adam::Adam(std::vector<ParamGroup> groups) : Adam("Adam", groups, first_options(groups)) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions defaults)
    : OptimizerWithOptions(std::move(name), std::move(groups), defaults) {}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam("AdamW", {{std::move(params), decoupled(options)}}, decoupled(options)) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "AdamW: got an empty parameter list");
}

AdamW::AdamW(std::vector<ParamGroup> groups) : Adam("AdamW", decoupled(groups), decoupled(first_options(groups))) {}

void Adam::step() {
  NoGradGuard no_grad;
  size_t i = 0;
  for (size_t group = 0; group < num_param_groups(); ++group) {
    const AdamOptions& o = options(group);
    for (const Tensor& param : params(group)) {
      const size_t index = i++;
      if (!param.grad().defined()) continue;
      auto& s = mutable_state(index);
      if (!s.count("step")) s["step"] = make_step_tensor(0);
      for (const char* key : {"exp_avg", "exp_avg_sq"})
        if (!s.count(key)) s[key] = zeros_like(param);
      if (o.amsgrad() && !s.count("max_exp_avg_sq")) s["max_exp_avg_sq"] = zeros_like(param);
      increment_step(s["step"]);
      // The per-step scalars as _single_tensor_adam computes them in Python floats.
      const double step = step_of(s["step"]);
      AdamStepArgs a;
      a.lr = o.lr();
      a.beta1 = o.betas()[0];
      a.beta2 = o.betas()[1];
      a.eps = o.eps();
      a.weight_decay = o.weight_decay();
      a.step_size = o.lr() / (1 - std::pow(o.betas()[0], step));
      a.bias_correction2_sqrt = std::pow(1 - std::pow(o.betas()[1], step), 0.5);
      a.decoupled_weight_decay = o.decoupled_weight_decay();
      a.amsgrad = o.amsgrad();
      a.maximize = o.maximize();
      Tensor p = param;
      Tensor none;
      internal::adam_step_(p, internal::contiguous(param.grad()), s["exp_avg"], s["exp_avg_sq"],
                           o.amsgrad() ? s["max_exp_avg_sq"] : none, a);
    }
  }
}

}  // namespace lockstep::optim
