// Adamax (adamax.h states the rule), composed from tensor ops in _single_tensor_adamax's order.
#include "optim/adamax.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

void AdamaxOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  check_non_negative(who, "epsilon", eps_);
  check_betas(who, betas_);
  check_non_negative(who, "weight_decay", weight_decay_);
}

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions options)
    : OptimizerWithOptions("Adamax", {{std::move(params), options}}, options) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "Adamax: got an empty parameter list");
}

Adamax::Adamax(std::vector<ParamGroup> groups)
    : OptimizerWithOptions("Adamax", groups, groups.empty() ? AdamaxOptions() : groups[0].options) {}

void Adamax::step() {
  using namespace internal;
  NoGradGuard no_grad;
  size_t i = 0;
  for (size_t group = 0; group < num_param_groups(); ++group) {
    const AdamaxOptions& o = options(group);
    const auto [beta1, beta2] = o.betas();
    for (const Tensor& param : params(group)) {
      const size_t index = i++;
      if (!param.grad().defined()) continue;
      auto& s = mutable_state(index);
      if (!s.count("step")) s["step"] = make_step_tensor(0);
      for (const char* key : {"exp_avg", "exp_inf"})
        if (!s.count(key)) s[key] = zeros_like(param);
      increment_step(s["step"]);
      const double step = step_of(s["step"]);
      Tensor p = param, exp_avg = s["exp_avg"], exp_inf = s["exp_inf"];
      Tensor g = o.maximize() ? neg(param.grad()) : param.grad();
      if (o.weight_decay() != 0) g = add(g, mul(p, o.weight_decay()));  // grad.add(param, alpha=weight_decay)
      lerp_(exp_avg, g, 1 - beta1);                                    // exp_avg.lerp_(grad, 1 - beta1)
      mul_(exp_inf, beta2);                                            // torch.maximum(exp_inf.mul_(beta2),
      copy_(exp_inf, maximum(exp_inf, add(abs(g), o.eps())));          //   grad.abs().add_(eps), out=exp_inf)
      const double clr = o.lr() / (1 - std::pow(beta1, step));
      add_(p, div(mul(exp_avg, -clr), exp_inf));                       // param.addcdiv_(exp_avg, exp_inf, value=-clr)
    }
  }
}

}  // namespace lockstep::optim
