// Optimizer: the base of lockstep's optimizers, as torch.optim.Optimizer over one parameter group.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace lockstep::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  // Clears the gradients of every parameter: to undefined (PyTorch's default) or to zeros.
  void zero_grad(bool set_to_none = true);
  // Updates every parameter that has a gradient, under NoGradGuard.
  virtual void step() = 0;
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;
};

}  // namespace lockstep::optim
