// RAdam: torch.optim.RAdam's update exactly (PyTorch's single-tensor form). For each parameter p with
// gradient g, at step t (counted per parameter from 1):
//   g = -g                                          (if maximize)
//   p = p * (1 - lr * weight_decay)                 (decoupled_weight_decay: RAdamW)
//   g = g + weight_decay * p                        (otherwise, if weight_decay != 0)
//   m = lerp(m, g, 1 - beta1)                       m: exp_avg
//   v = beta2 * v + (1 - beta2) * g * g             v: exp_avg_sq
//   rho_inf = 2 / (1 - beta2) - 1,  rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)
//   rho_t > 5 (the variance is tractable):
//     rect = sqrt((rho_t - 4) (rho_t - 2) rho_inf / ((rho_inf - 4) (rho_inf - 2) rho_t))
//     p = p - m / (1 - beta1^t) * lr * sqrt(1 - beta2^t) / (sqrt(v) + eps) * rect
//   otherwise (the first steps): p = p - m / (1 - beta1^t) * lr       (SGD with momentum)
// Composed from tensor ops, as Adadelta. State: "step" (float32 []), "exp_avg", "exp_avg_sq".
#pragma once

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct RAdamOptions {
  using Betas = std::array<double, 2>;
  RAdamOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: RAdamOptions(1e-2)
  LOCKSTEP_ARG(double, lr, 1e-3);
  LOCKSTEP_ARG(Betas, betas, {0.9, 0.999});
  LOCKSTEP_ARG(double, eps, 1e-8);
  LOCKSTEP_ARG(double, weight_decay, 0);
  LOCKSTEP_ARG(bool, decoupled_weight_decay, false);
  LOCKSTEP_ARG(bool, maximize, false);

 public:
  // betas(0.9, 0.95), as betas({0.9, 0.95}).
  RAdamOptions& betas(double beta1, double beta2) { return betas(Betas{beta1, beta2}); }
  // Throws, naming `who`, for options torch.optim.RAdam rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr_), f("betas", betas_), f("eps", eps_), f("weight_decay", weight_decay_), f("maximize", maximize_);
    f("decoupled_weight_decay", decoupled_weight_decay_);
  }
};

class RAdam : public OptimizerWithOptions<RAdamOptions> {
 public:
  // One group with `options`, as torch.optim.RAdam(params, lr=...).
  RAdam(std::vector<Tensor> params, RAdamOptions options = {});
  // Several groups, each with its own options; the first group's options are the defaults.
  explicit RAdam(std::vector<ParamGroup> groups);
  void step() override;

 protected:
  std::vector<std::string> state_names() const override { return {"step", "exp_avg", "exp_avg_sq"}; }
};

}  // namespace lockstep::optim
