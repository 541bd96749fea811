// RAdam (radam.h states the rule), composed from tensor ops in _single_tensor_radam's order.
#include "optim/radam.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

void RAdamOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  check_non_negative(who, "epsilon", eps_);
  check_betas(who, betas_);
  check_non_negative(who, "weight_decay", weight_decay_);
}

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions options)
    : OptimizerWithOptions("RAdam", {{std::move(params), options}}, options) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "RAdam: got an empty parameter list");
}

RAdam::RAdam(std::vector<ParamGroup> groups)
    : OptimizerWithOptions("RAdam", groups, groups.empty() ? RAdamOptions() : groups[0].options) {}

void RAdam::step() {
  using namespace internal;
  NoGradGuard no_grad;
  size_t i = 0;
  for (size_t group = 0; group < num_param_groups(); ++group) {
    const RAdamOptions& o = options(group);
    const auto [beta1, beta2] = o.betas();
    const double lr = o.lr();
    for (const Tensor& param : params(group)) {
      const size_t index = i++;
      if (!param.grad().defined()) continue;
      auto& s = mutable_state(index);
      if (!s.count("step")) s["step"] = make_step_tensor(0);
      for (const char* key : {"exp_avg", "exp_avg_sq"})
        if (!s.count(key)) s[key] = zeros_like(param);
      increment_step(s["step"]);
      const double step = step_of(s["step"]);
      Tensor p = param, exp_avg = s["exp_avg"], exp_avg_sq = s["exp_avg_sq"];
      Tensor g = o.maximize() ? neg(param.grad()) : param.grad();
      if (o.weight_decay() != 0) {
        if (o.decoupled_weight_decay()) mul_(p, 1 - lr * o.weight_decay());  // param.mul_(1 - lr * weight_decay)
        else g = add(g, mul(p, o.weight_decay()));                           // grad.add(param, alpha=weight_decay)
      }
      lerp_(exp_avg, g, 1 - beta1);                                     // exp_avg.lerp_(grad, 1 - beta1)
      mul_(exp_avg_sq, beta2);                                          // exp_avg_sq.mul_(beta2)
      add_(exp_avg_sq, mul(mul(g, 1 - beta2), g));                      //   .addcmul_(grad, grad, value=1 - beta2)
      const double bias_correction1 = 1 - std::pow(beta1, step);
      const double bias_correction2 = 1 - std::pow(beta2, step);
      const Tensor bias_corrected_exp_avg = binary_scalar(BinaryOp::Div, exp_avg, bias_correction1);
      // The scalars in Python floats, as _single_tensor_radam (pow(x, 0.5) for its ** 0.5, not sqrt).
      const double rho_inf = 2 / (1 - beta2) - 1;
      const double rho_t = rho_inf - 2 * step * std::pow(beta2, step) / bias_correction2;
      if (rho_t > 5.0) {
        const double rect =
            std::pow((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t), 0.5);
        // (bias_correction2 ** 0.5) / exp_avg_sq.sqrt().add_(eps)
        const Tensor adaptive_lr =
            binary_scalar(BinaryOp::Div, add(sqrt(exp_avg_sq), o.eps()), std::pow(bias_correction2, 0.5), true);
        // param.add_(bias_corrected_exp_avg * lr * adaptive_lr * rect, alpha=-1.0)
        add_(p, mul(mul(mul(bias_corrected_exp_avg, lr), adaptive_lr), rect), -1.0);
      } else {
        add_(p, mul(bias_corrected_exp_avg, lr), -1.0);                 // param.add_(... * lr, alpha=-1.0)
      }
    }
  }
}

}  // namespace lockstep::optim
