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

#include "optim/optimizer.h"

namespace lockstep::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;
  // AdamW's rule (set by AdamW itself).
  bool decoupled_weight_decay = false;
  AdamOptions(double lr_ = 1e-3) : lr(lr_) {}
  AdamOptions& set_lr(double l) { lr = l; return *this; }
  AdamOptions& set_betas(double beta1, double beta2) { betas = {beta1, beta2}; return *this; }
  AdamOptions& set_eps(double e) { eps = e; return *this; }
  AdamOptions& set_weight_decay(double w) { weight_decay = w; return *this; }
  AdamOptions& set_amsgrad(bool a) { amsgrad = a; return *this; }
  AdamOptions& set_maximize(bool m) { maximize = m; return *this; }
  AdamOptions& set_decoupled_weight_decay(bool d) { decoupled_weight_decay = d; return *this; }

  // Throws, naming `who`, for options torch.optim.Adam rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr), f("betas", betas), f("eps", eps), f("weight_decay", weight_decay), f("amsgrad", amsgrad);
    f("maximize", maximize), f("decoupled_weight_decay", decoupled_weight_decay);
  }
};

// torch.optim.AdamW's defaults: weight_decay 1e-2, decoupled.
struct AdamWOptions : AdamOptions {
  AdamWOptions(double lr_ = 1e-3) : AdamOptions(lr_) {
    weight_decay = 1e-2;
    decoupled_weight_decay = true;
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
