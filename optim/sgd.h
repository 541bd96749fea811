// SGD: torch.optim.SGD's update rule exactly. For each parameter p with gradient g:
//   g = g + weight_decay * p                      (if weight_decay != 0)
//   if momentum != 0:
//     buf = g                                     (first step: the buffer is the gradient itself)
//     buf = momentum * buf + (1 - dampening) * g  (later steps)
//     g = g + momentum * buf  if nesterov  else  buf
//   p = p - lr * g
// The whole update is one fused kernel per parameter (Backend::sgd_step).
#pragma once

#include "optim/optimizer.h"

namespace lockstep::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  SGDOptions(double lr_ = 0.01) : lr(lr_) {}
  SGDOptions& set_momentum(double m) { momentum = m; return *this; }
  SGDOptions& set_dampening(double d) { dampening = d; return *this; }
  SGDOptions& set_weight_decay(double w) { weight_decay = w; return *this; }
  SGDOptions& set_nesterov(bool n) { nesterov = n; return *this; }
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  const SGDOptions& options() const { return options_; }
  void set_lr(double lr);
  // The momentum buffer of parameter i (undefined before the first step or without momentum).
  const Tensor& momentum_buffer(size_t i) const { return buffers_.at(i); }
  void set_momentum_buffer(size_t i, const Tensor& buf);

 private:
  SGDOptions options_;
  std::vector<Tensor> buffers_;
};

}  // namespace lockstep::optim
