// NAdam: torch.optim.NAdam's update exactly (PyTorch's single-tensor form). For each parameter p with
// gradient g, at step t (counted per parameter from 1):
//   g = -g                                          (if maximize)
//   p = p * (1 - lr * weight_decay)                 (decoupled_weight_decay: NAdamW)
//   g = g + weight_decay * p                        (otherwise, if weight_decay != 0)
//   mu_t = beta1 * (1 - 0.5 * 0.96^(t * momentum_decay)), mu_{t+1} likewise
//   P = P * mu_t                                    P: mu_product, the product of mu_1..mu_t
//   m = lerp(m, g, 1 - beta1)                       m: exp_avg
//   v = beta2 * v + (1 - beta2) * g * g             v: exp_avg_sq
//   denom = sqrt(v / (1 - beta2^t)) + eps
//   p = p - lr * (1 - mu_t) / (1 - P) * g / denom
//   p = p - lr * mu_{t+1} / (1 - P * mu_{t+1}) * m / denom
// Composed from tensor ops, as Adadelta. State: "step" and "mu_product" (float32 [] on the CPU: P is
// multiplied in float32, as PyTorch's), "exp_avg", "exp_avg_sq".
#pragma once

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct NAdamOptions {
  using Betas = std::array<double, 2>;
  NAdamOptions(double lr = 2e-3) : lr_(lr) {}  // NOLINT: NAdamOptions(1e-3)
  LOCKSTEP_ARG(double, lr, 2e-3);
  LOCKSTEP_ARG(Betas, betas, {0.9, 0.999});
  LOCKSTEP_ARG(double, eps, 1e-8);
  LOCKSTEP_ARG(double, weight_decay, 0);
  LOCKSTEP_ARG(double, momentum_decay, 4e-3);
  LOCKSTEP_ARG(bool, decoupled_weight_decay, false);
  LOCKSTEP_ARG(bool, maximize, false);

 public:
  // betas(0.9, 0.95), as betas({0.9, 0.95}).
  NAdamOptions& betas(double beta1, double beta2) { return betas(Betas{beta1, beta2}); }
  // Throws, naming `who`, for options torch.optim.NAdam rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr_), f("betas", betas_), f("eps", eps_), f("weight_decay", weight_decay_);
    f("momentum_decay", momentum_decay_), f("decoupled_weight_decay", decoupled_weight_decay_);
    f("maximize", maximize_);
  }
};

class NAdam : public OptimizerWithOptions<NAdamOptions> {
 public:
  // One group with `options`, as torch.optim.NAdam(params, lr=...).
  NAdam(std::vector<Tensor> params, NAdamOptions options = {});
  // Several groups, each with its own options; the first group's options are the defaults.
  explicit NAdam(std::vector<ParamGroup> groups);
  void step() override;

 protected:
  std::vector<std::string> state_names() const override { return {"step", "mu_product", "exp_avg", "exp_avg_sq"}; }
};

}  // namespace lockstep::optim
