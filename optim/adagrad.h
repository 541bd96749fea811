// Adagrad: torch.optim.Adagrad's update exactly (PyTorch's single-tensor form, dense gradients). For
// each parameter p with gradient g, at step t (counted per parameter from 1):
//   g = -g                                          (if maximize)
//   g = g + weight_decay * p                        (if weight_decay != 0)
//   clr = lr / (1 + (t - 1) * lr_decay)
//   s = s + g * g                                   s: sum
//   p = p - clr * g / (sqrt(s) + eps)
// Composed from tensor ops, as Adadelta. State: "step" (float32 []), "sum". As PyTorch's, the state of
// the parameters given at construction is made there (state_dict() has it before the first step), and
// "sum" starts at the optimizer's initial_accumulator_value (the defaults'), whatever a group says.
#pragma once

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct AdagradOptions {
  AdagradOptions(double lr = 1e-2) : lr_(lr) {}  // NOLINT: AdagradOptions(0.1)
  LOCKSTEP_ARG(double, lr, 1e-2);
  LOCKSTEP_ARG(double, lr_decay, 0);
  LOCKSTEP_ARG(double, weight_decay, 0);
  LOCKSTEP_ARG(double, initial_accumulator_value, 0);
  LOCKSTEP_ARG(double, eps, 1e-10);
  LOCKSTEP_ARG(bool, maximize, false);

 public:
  // Throws, naming `who`, for options torch.optim.Adagrad rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr_), f("lr_decay", lr_decay_), f("eps", eps_), f("weight_decay", weight_decay_);
    f("initial_accumulator_value", initial_accumulator_value_), f("maximize", maximize_);
  }
};

class Adagrad : public OptimizerWithOptions<AdagradOptions> {
 public:
  // One group with `options`, as torch.optim.Adagrad(params, lr=...).
  Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  // Several groups, each with its own options; the first group's options are the defaults.
  explicit Adagrad(std::vector<ParamGroup> groups);
  void step() override;

 protected:
  std::vector<std::string> state_names() const override { return {"step", "sum"}; }

 private:
  void init_state(size_t index, const Tensor& param);
};

}  // namespace lockstep::optim
