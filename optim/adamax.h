// Adamax: torch.optim.Adamax's update exactly (PyTorch's single-tensor form). For each parameter p with
// gradient g, at step t (counted per parameter from 1):
//   g = -g                                          (if maximize)
//   g = g + weight_decay * p                        (if weight_decay != 0)
//   m = lerp(m, g, 1 - beta1)                       m: exp_avg
//   u = max(beta2 * u, |g| + eps)                   u: exp_inf (NaN propagates, as torch.maximum)
//   p = p - (lr / (1 - beta1^t)) * m / u
// Composed from tensor ops, as Adadelta. State: "step" (float32 []), "exp_avg", "exp_inf".
#pragma once

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct AdamaxOptions {
  using Betas = std::array<double, 2>;
  AdamaxOptions(double lr = 2e-3) : lr_(lr) {}  // NOLINT: AdamaxOptions(1e-3)
  LOCKSTEP_ARG(double, lr, 2e-3);
  LOCKSTEP_ARG(Betas, betas, {0.9, 0.999});
  LOCKSTEP_ARG(double, eps, 1e-8);
  LOCKSTEP_ARG(double, weight_decay, 0);
  LOCKSTEP_ARG(bool, maximize, false);

 public:
  // betas(0.9, 0.95), as betas({0.9, 0.95}).
  AdamaxOptions& betas(double beta1, double beta2) { return betas(Betas{beta1, beta2}); }
  // Throws, naming `who`, for options torch.optim.Adamax rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr_), f("betas", betas_), f("eps", eps_), f("weight_decay", weight_decay_), f("maximize", maximize_);
  }
};

class Adamax : public OptimizerWithOptions<AdamaxOptions> {
 public:
  // One group with `options`, as torch.optim.Adamax(params, lr=...).
  Adamax(std::vector<Tensor> params, AdamaxOptions options = {});
  // Several groups, each with its own options; the first group's options are the defaults.
  explicit Adamax(std::vector<ParamGroup> groups);
  void step() override;

 protected:
  std::vector<std::string> state_names() const override { return {"step", "exp_avg", "exp_inf"}; }
};

}  // namespace lockstep::optim
