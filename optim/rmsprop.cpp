// RMSprop (rmsprop.h states the rule), composed from tensor ops in _single_tensor_rmsprop's order.
#include "optim/rmsprop.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

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
      Tensor p = param, square_avg = s["square_avg"];
      Tensor g = o.maximize() ? neg(param.grad()) : param.grad();
      if (o.weight_decay() != 0) g = add(g, mul(p, o.weight_decay()));  // grad.add(param, alpha=weight_decay)
      mul_(square_avg, o.alpha());                                     // square_avg.mul_(alpha)
      add_(square_avg, mul(mul(g, 1 - o.alpha()), g));                 //   .addcmul_(grad, grad, value=1 - alpha)
      Tensor avg;
      if (o.centered()) {
        Tensor grad_avg = s["grad_avg"];
        lerp_(grad_avg, g, 1 - o.alpha());                                // grad_avg.lerp_(grad, 1 - alpha)
        avg = sqrt(sub(square_avg, mul(grad_avg, grad_avg)));            // square_avg.addcmul(.., value=-1).sqrt_()
      } else {
        avg = sqrt(square_avg);
      }
      avg = add(avg, o.eps());                                         // avg.add_(eps)
      if (o.momentum() > 0) {
        Tensor buf = s["momentum_buffer"];
        mul_(buf, o.momentum());                                       // buf.mul_(momentum)
        add_(buf, div(g, avg));                                        //   .addcdiv_(grad, avg)
        add_(p, buf, -o.lr());                                         // param.add_(buf, alpha=-lr)
      } else {
        add_(p, div(mul(g, -o.lr()), avg));                            // param.addcdiv_(grad, avg, value=-lr)
      }
    }
  }
}

}  // namespace lockstep::optim
