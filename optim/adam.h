// Adam and AdamW: torch.optim.Adam/AdamW's update exactly (PyTorch's single-tensor form, which its CPU
// path runs). For each parameter p with gradient g, at step t (counted per parameter from 1):
//   g = -g                                         (if maximize)
//   p = p * (1 - lr * weight_decay)                (AdamW: decoupled weight decay)
//   g = g + weight_decay * p                       (Adam: L2 penalty in the gradient)
//   m = lerp(m, g, 1 - beta1)                      m: exp_avg
//   v = beta2 * v + (1 - beta2) * g * g            v: exp_avg_sq
//   vmax = max(vmax, v); v' = vmax if amsgrad else v
//   denom = sqrt(v') / sqrt(1 - beta2^t) + eps     (eps outside the square root, after bias correction)
//   p = p - (lr / (1 - beta1^t)) * m / denom
// One fused kernel per parameter (Backend::adam_step, rule in tensor/optim_step.h). State: "step"
// (float32 []), "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad.
#pragma once

#include <tuple>

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct AdamOptions {
  using Betas = std::array<double, 2>;
  AdamOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: AdamOptions(3e-4)
  LOCKSTEP_ARG(double, lr, 1e-3);
  LOCKSTEP_ARG(Betas, betas, {0.9, 0.999});
  LOCKSTEP_ARG(double, eps, 1e-8);
  LOCKSTEP_ARG(double, weight_decay, 0);
  LOCKSTEP_ARG(bool, amsgrad, false);
  LOCKSTEP_ARG(bool, maximize, false);
  // AdamW's rule (set by AdamW itself).
  LOCKSTEP_ARG(bool, decoupled_weight_decay, false);

 public:
  // betas(0.9, 0.95), as betas({0.9, 0.95}).
  AdamOptions& betas(double beta1, double beta2) { return betas(Betas{beta1, beta2}); }
  // LibTorch's spelling: betas(std::make_tuple(0.5, 0.999)).
  AdamOptions& betas(const std::tuple<double, double>& b) { return betas(std::get<0>(b), std::get<1>(b)); }
  // Throws, naming `who`, for options torch.optim.Adam rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr_), f("betas", betas_), f("eps", eps_), f("weight_decay", weight_decay_), f("amsgrad", amsgrad_);
    f("maximize", maximize_), f("decoupled_weight_decay", decoupled_weight_decay_);
  }
};

// torch.optim.AdamW's defaults: weight_decay 1e-2, decoupled.
struct AdamWOptions : AdamOptions {
  AdamWOptions(double lr = 1e-3) : AdamOptions(lr) {  // NOLINT
    weight_decay(1e-2);
    decoupled_weight_decay(true);
  }
};

class Adam : public OptimizerWithOptions<AdamOptions> {
 public:
  // One group with `options`, as torch.optim.Adam(params, lr=...).
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  // Several groups, each with its own options; the first group's options are the defaults.
  explicit Adam(std::vector<ParamGroup> groups);
  void step() override;

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions defaults);
  std::vector<std::string> state_names() const override {
    return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }
};

// Adam with decoupled weight decay (every group's decoupled_weight_decay is set).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options = AdamWOptions());
  explicit AdamW(std::vector<ParamGroup> groups);
};

}  // namespace lockstep::optim
