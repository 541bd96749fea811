// RMSprop (rmsprop.h states the rule): one fused pass per parameter, tensor/optim_step.h's rmsprop_update
// (_single_tensor_rmsprop's ops in their order).
#include "optim/rmsprop.h"

#include <array>
#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/optim_step.h"

namespace lockstep::optim {

void RMSpropOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  check_non_negative(who, "epsilon", eps_);
  check_non_negative(who, "momentum", momentum_);
  check_non_negative(who, "weight_decay", weight_decay_);
  check_non_negative(who, "alpha", alpha_);
}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : OptimizerWithOptions("RMSprop", {{std::move(params), options}}, options) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "RMSprop: got an empty parameter list");
}

RMSprop::RMSprop(std::vector<ParamGroup> groups)
    : OptimizerWithOptions("RMSprop", groups, groups.empty() ? RMSpropOptions() : groups[0].options) {}

void RMSprop::step() {
  using namespace internal;
  NoGradGuard no_grad;
  size_t i = 0;
  for (size_t group = 0; group < num_param_groups(); ++group) {
    const RMSpropOptions& o = options(group);
    for (const Tensor& param : params(group)) {
      const size_t index = i++;
      if (!param.grad().defined()) continue;
      auto& s = mutable_state(index);
      if (!s.count("step")) s["step"] = make_step_tensor(0);
      if (!s.count("square_avg")) s["square_avg"] = zeros_like(param);
      // Made when first needed: PyTorch makes them with the rest, when the option is on at the first step.
      if (o.momentum() > 0 && !s.count("momentum_buffer")) s["momentum_buffer"] = zeros_like(param);
      if (o.centered() && !s.count("grad_avg")) s["grad_avg"] = zeros_like(param);
      increment_step(s["step"]);
      Tensor p = param;
      OptimStepArgs args;
      args.lr = o.lr(), args.eps = o.eps(), args.weight_decay = o.weight_decay(), args.alpha = o.alpha();
      args.momentum = o.momentum(), args.maximize = o.maximize(), args.centered = o.centered();
      // One fused pass (tensor/optim_step.h's rmsprop_update); a state loaded in another dtype is cast first.
      std::array<Tensor, 3> st;
      const char* keys[3] = {"square_avg", "grad_avg", "momentum_buffer"};
      std::array<Tensor*, 3> states{};
      for (int k = 0; k < 3; ++k) {
        if (!s.count(keys[k])) continue;
        Tensor& t = s[keys[k]];
        if (t.dtype() != p.dtype() || !t.is_contiguous()) t = contiguous(to_dtype(t, p.dtype()));
        st[k] = t;
        states[k] = &st[k];
      }
      optim_step_(OptimRule::RMSprop, p, contiguous(param.grad()), states, args);
    }
  }
}

}  // namespace lockstep::optim
