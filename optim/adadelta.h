// Adadelta: torch.optim.Adadelta's update exactly (PyTorch's single-tensor form). For each parameter p
// with gradient g:
//   g = -g                                          (if maximize)
//   g = g + weight_decay * p                        (if weight_decay != 0)
//   v = rho * v + (1 - rho) * g * g                 v: square_avg
//   delta = sqrt(u + eps) / sqrt(v + eps) * g       u: acc_delta (before this step's update)
//   u = rho * u + (1 - rho) * delta * delta
//   p = p - lr * delta
// Composed from tensor ops (a handful of elementwise kernels per parameter), so it runs wherever
// those run, CPU and CUDA alike. State: "step" (float32 [], counted as PyTorch does though the rule
// does not use it), "square_avg", "acc_delta".
#pragma once

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct AdadeltaOptions {
  AdadeltaOptions(double lr = 1.0) : lr_(lr) {}  // NOLINT: AdadeltaOptions(1.0)
  LOCKSTEP_ARG(double, lr, 1.0);
  LOCKSTEP_ARG(double, rho, 0.9);
  LOCKSTEP_ARG(double, eps, 1e-6);
  LOCKSTEP_ARG(double, weight_decay, 0);
  LOCKSTEP_ARG(bool, maximize, false);

 public:
  // Throws, naming `who`, for options torch.optim.Adadelta rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr_), f("rho", rho_), f("eps", eps_), f("weight_decay", weight_decay_), f("maximize", maximize_);
  }
};

class Adadelta : public OptimizerWithOptions<AdadeltaOptions> {
 public:
  // One group with `options`, as torch.optim.Adadelta(params, lr=...).
  Adadelta(std::vector<Tensor> params, AdadeltaOptions options = {});
  // Several groups, each with its own options; the first group's options are the defaults.
  explicit Adadelta(std::vector<ParamGroup> groups);
  void step() override;

 protected:
  std::vector<std::string> state_names() const override { return {"step", "square_avg", "acc_delta"}; }
};

}  // namespace lockstep::optim
