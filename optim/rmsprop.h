// RMSprop: torch.optim.RMSprop's update exactly (PyTorch's single-tensor form). For each parameter p
// with gradient g:
//   g = -g                                          (if maximize)
//   g = g + weight_decay * p                        (if weight_decay != 0)
//   v = alpha * v + (1 - alpha) * g * g             v: square_avg
//   centered:  a = lerp(a, g, 1 - alpha)            a: grad_avg
//              avg = sqrt(v - a * a) + eps
//   else:      avg = sqrt(v) + eps
//   momentum > 0:  buf = momentum * buf + g / avg;  p = p - lr * buf      buf: momentum_buffer
//   else:          p = p - lr * g / avg
// Composed from tensor ops, as Adadelta. State: "step" (float32 [], counted as PyTorch does though the
// rule does not use it), "square_avg", "momentum_buffer" (with momentum), "grad_avg" (centered).
#pragma once

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct RMSpropOptions {
  RMSpropOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT: RMSpropOptions(1e-3)
  LOCKSTEP_ARG(double, lr, 1e-2);
  LOCKSTEP_ARG(double, alpha, 0.99);
  LOCKSTEP_ARG(double, eps, 1e-8);
  LOCKSTEP_ARG(double, weight_decay, 0);
  LOCKSTEP_ARG(double, momentum, 0);
  LOCKSTEP_ARG(bool, centered, false);
  LOCKSTEP_ARG(bool, maximize, false);

 public:
  // Throws, naming `who`, for options torch.optim.RMSprop rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr_), f("momentum", momentum_), f("alpha", alpha_), f("eps", eps_), f("centered", centered_);
    f("weight_decay", weight_decay_), f("maximize", maximize_);
  }
};

class RMSprop : public OptimizerWithOptions<RMSpropOptions> {
 public:
  // One group with `options`, as torch.optim.RMSprop(params, lr=...).
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  // Several groups, each with its own options; the first group's options are the defaults.
  explicit RMSprop(std::vector<ParamGroup> groups);
  void step() override;

 protected:
  std::vector<std::string> state_names() const override {
    return {"step", "square_avg", "momentum_buffer", "grad_avg"};
  }
};

}  // namespace lockstep::optim
