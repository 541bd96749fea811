// Activation modules.
#pragma once

#include "autograd/functions.h"
#include "nn/module.h"

namespace lockstep::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override { return relu(input); }
};

}  // namespace lockstep::nn
