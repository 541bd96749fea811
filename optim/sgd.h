// SGD: torch.optim.SGD's update rule exactly. For each parameter p with gradient g:
//   g = -g                                        (if maximize)
//   g = g + weight_decay * p                      (if weight_decay != 0)
//   if momentum != 0:
//     buf = g                                     (first step: the buffer is the gradient itself)
//     buf = momentum * buf + (1 - dampening) * g  (later steps)
//     g = g + momentum * buf  if nesterov  else  buf
//   p = p - lr * g
// The whole update is one fused kernel per parameter (Backend::sgd_step). State: "momentum_buffer".
#pragma once

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct SGDOptions {
  SGDOptions(double lr = 0.01) : lr_(lr) {}  // NOLINT: SGDOptions(0.1)
  LOCKSTEP_ARG(double, lr, 0.01);
  LOCKSTEP_ARG(double, momentum, 0);
  LOCKSTEP_ARG(double, dampening, 0);
  LOCKSTEP_ARG(double, weight_decay, 0);
  LOCKSTEP_ARG(bool, nesterov, false);
  LOCKSTEP_ARG(bool, maximize, false);

 public:
  // Throws, naming `who`, for options torch.optim.SGD rejects.
  void check(const std::string& who) const;
  // The options under PyTorch's param_group keys.
  template <class F>
  void for_each(F&& f) {
    f("lr", lr_), f("momentum", momentum_), f("dampening", dampening_), f("weight_decay", weight_decay_);
    f("nesterov", nesterov_), f("maximize", maximize_);
  }
};

class SGD : public OptimizerWithOptions<SGDOptions> {
 public:
  // One group with `options`, as torch.optim.SGD(params, lr=...).
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Several groups, each with its own options, as torch.optim.SGD([{"params": ..., "lr": ...}, ...]);
  // the first group's options are the defaults.
  explicit SGD(std::vector<ParamGroup> groups);
  void step() override;
  // The momentum buffer of parameter i (undefined before the first step or without momentum).
  const Tensor& momentum_buffer(size_t i) const;
  void set_momentum_buffer(size_t i, const Tensor& buf);

 protected:
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
};

}  // namespace lockstep::optim
