// Loss modules, as torch.nn.CrossEntropyLoss and torch.nn.MSELoss (mean reduction).
#pragma once

#include "nn/functional.h"
#include "nn/module.h"

namespace lockstep::nn {

class CrossEntropyLoss : public Module {
 public:
  CrossEntropyLoss() : Module("CrossEntropyLoss") {}
  Tensor forward(const Tensor& input, const Tensor& target) { return functional::cross_entropy(input, target); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
};

class MSELoss : public Module {
 public:
  MSELoss() : Module("MSELoss") {}
  Tensor forward(const Tensor& input, const Tensor& target) { return functional::mse_loss(input, target); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
};

}  // namespace lockstep::nn
