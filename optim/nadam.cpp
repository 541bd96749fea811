// NAdam (nadam.h states the rule), composed from tensor ops in _single_tensor_nadam's order.
#include "optim/nadam.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

void NAdamOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  check_non_negative(who, "epsilon", eps_);
  check_betas(who, betas_);
  check_non_negative(who, "weight_decay", weight_decay_);
  check_non_negative(who, "momentum_decay", momentum_decay_);
}

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions options)
    : OptimizerWithOptions("NAdam", {{std::move(params), options}}, options) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "NAdam: got an empty parameter list");
}

NAdam::NAdam(std::vector<ParamGroup> groups)
    : OptimizerWithOptions("NAdam", groups, groups.empty() ? NAdamOptions() : groups[0].options) {}

void NAdam::step() {
  using namespace internal;
  NoGradGuard no_grad;
  size_t i = 0;
  for (size_t group = 0; group < num_param_groups(); ++group) {
    const NAdamOptions& o = options(group);
    const auto [beta1, beta2] = o.betas();
    const double lr = o.lr();
    for (const Tensor& param : params(group)) {
      const size_t index = i++;
      if (!param.grad().defined()) continue;
      auto& s = mutable_state(index);
      if (!s.count("step")) s["step"] = make_step_tensor(0);
      // A loaded mu_product may come in another dtype or on another device: back to PyTorch's float32 CPU
      // scalar, which the in-place product below needs.
      if (!s.count("mu_product")) s["mu_product"] = scalar_tensor(1.0, TensorOptions(kFloat32));
      else if (s["mu_product"].dtype() != kFloat32 || s["mu_product"].device() != Device::cpu())
        s["mu_product"] = to_dtype(to_device(s["mu_product"], Device::cpu()), kFloat32);
      for (const char* key : {"exp_avg", "exp_avg_sq"})
        if (!s.count(key)) s[key] = zeros_like(param);
      increment_step(s["step"]);
      const double step = step_of(s["step"]);
      Tensor p = param, exp_avg = s["exp_avg"], exp_avg_sq = s["exp_avg_sq"];
      Tensor g = o.maximize() ? neg(param.grad()) : param.grad();
      const double bias_correction2 = 1 - std::pow(beta2, step);
      if (o.weight_decay() != 0) {
        if (o.decoupled_weight_decay()) mul_(p, 1 - lr * o.weight_decay());  // param.mul_(1 - lr * weight_decay)
        else g = add(g, mul(p, o.weight_decay()));                           // grad.add(param, alpha=weight_decay)
      }
      const double mu = beta1 * (1.0 - 0.5 * std::pow(0.96, step * o.momentum_decay()));
      const double mu_next = beta1 * (1.0 - 0.5 * std::pow(0.96, (step + 1) * o.momentum_decay()));
      // mu_product *= mu: a float32 tensor times a Python float is float32 times float32.
      float& mu_product = s["mu_product"].data<float>()[0];
      mu_product = mu_product * static_cast<float>(mu);
      lerp_(exp_avg, g, 1 - beta1);                                     // exp_avg.lerp_(grad, 1 - beta1)
      mul_(exp_avg_sq, beta2);                                          // exp_avg_sq.mul_(beta2)
      add_(exp_avg_sq, mul(mul(g, 1 - beta2), g));                      //   .addcmul_(grad, grad, value=1 - beta2)
      // exp_avg_sq.div(bias_correction2).sqrt(), then denom.add_(eps)
      const Tensor denom = add(sqrt(binary_scalar(BinaryOp::Div, exp_avg_sq, bias_correction2)), o.eps());
      const double mu_product_next = static_cast<double>(mu_product) * mu_next;
      // param.addcdiv_(grad, denom, value=...), then param.addcdiv_(exp_avg, denom, value=...)
      add_(p, div(mul(g, -lr * (1.0 - mu) / (1.0 - static_cast<double>(mu_product))), denom));
      add_(p, div(mul(exp_avg, (-lr * mu_next) / (1.0 - mu_product_next)), denom));
    }
  }
}

}  // namespace lockstep::optim
