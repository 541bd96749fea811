// Adadelta (adadelta.h states the rule), composed from tensor ops in _single_tensor_adadelta's order.
#include "optim/adadelta.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

void AdadeltaOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  LOCKSTEP_CHECK(rho_ >= 0 && rho_ <= 1, who, ": Invalid rho value: ", rho_);
  check_non_negative(who, "epsilon", eps_);
  check_non_negative(who, "weight_decay", weight_decay_);
}

Adadelta::Adadelta(std::vector<Tensor> params, AdadeltaOptions options)
    : OptimizerWithOptions("Adadelta", {{std::move(params), options}}, options) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "Adadelta: got an empty parameter list");
}

Adadelta::Adadelta(std::vector<ParamGroup> groups)
    : OptimizerWithOptions("Adadelta", groups, groups.empty() ? AdadeltaOptions() : groups[0].options) {}

void Adadelta::step() {
  using namespace internal;
  NoGradGuard no_grad;
  size_t i = 0;
  for (size_t group = 0; group < num_param_groups(); ++group) {
    const AdadeltaOptions& o = options(group);
    for (const Tensor& param : params(group)) {
      const size_t index = i++;
      if (!param.grad().defined()) continue;
      auto& s = mutable_state(index);
      if (!s.count("step")) s["step"] = make_step_tensor(0);
      for (const char* key : {"square_avg", "acc_delta"})
        if (!s.count(key)) s[key] = zeros_like(param);
      increment_step(s["step"]);
      Tensor p = param, square_avg = s["square_avg"], acc_delta = s["acc_delta"];
      Tensor g = o.maximize() ? neg(param.grad()) : param.grad();
      if (o.weight_decay() != 0) g = add(g, mul(p, o.weight_decay()));  // grad.add(param, alpha=weight_decay)
      mul_(square_avg, o.rho());                                      // square_avg.mul_(rho)
      add_(square_avg, mul(g, g), 1 - o.rho());                       //   .addcmul_(grad, grad, value=1 - rho)
      const Tensor std = sqrt(add(square_avg, o.eps()));              // square_avg.add(eps).sqrt_()
      // delta = acc_delta.add(eps).sqrt_(); delta.div_(std).mul_(grad)
      const Tensor delta = mul(div(sqrt(add(acc_delta, o.eps())), std), g);
      mul_(acc_delta, o.rho());                                       // acc_delta.mul_(rho)
      add_(acc_delta, mul(delta, delta), 1 - o.rho());                //   .addcmul_(delta, delta, value=1 - rho)
      add_(p, delta, -o.lr());                                        // param.add_(delta, alpha=-lr)
    }
  }
}

}  // namespace lockstep::optim
