// Activation modules, as torch.nn.ReLU, GELU, Tanh, Sigmoid, SiLU, LeakyReLU, Softmax.
#pragma once

#include <string>

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

class ReLUImpl : public Module {
 public:
  ReLUImpl() : Module("ReLU") {}
  Tensor forward(const Tensor& input) { return lockstep::relu(input); }
};
LOCKSTEP_MODULE(ReLU);

// approximate: "none" (erf) or "tanh", as torch.nn.GELU.
class GELUImpl : public Module {
 public:
  explicit GELUImpl(std::string approximate = "none") : Module("GELU"), approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& input) { return lockstep::gelu(input, approximate); }
  std::string approximate;
};
LOCKSTEP_MODULE(GELU);

class TanhImpl : public Module {
 public:
  TanhImpl() : Module("Tanh") {}
  Tensor forward(const Tensor& input) { return lockstep::tanh(input); }
};
LOCKSTEP_MODULE(Tanh);

class SigmoidImpl : public Module {
 public:
  SigmoidImpl() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) { return lockstep::sigmoid(input); }
};
LOCKSTEP_MODULE(Sigmoid);

class SiLUImpl : public Module {
 public:
  SiLUImpl() : Module("SiLU") {}
  Tensor forward(const Tensor& input) { return lockstep::silu(input); }
};
LOCKSTEP_MODULE(SiLU);

class LeakyReLUImpl : public Module {
 public:
  explicit LeakyReLUImpl(double negative_slope = 0.01) : Module("LeakyReLU"), negative_slope(negative_slope) {}
  Tensor forward(const Tensor& input) { return functional::leaky_relu(input, negative_slope); }
  double negative_slope;
};
LOCKSTEP_MODULE(LeakyReLU);

class SoftmaxImpl : public Module {
 public:
  explicit SoftmaxImpl(int64_t dim) : Module("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& input) { return lockstep::softmax(input, dim); }
  int64_t dim;
};
LOCKSTEP_MODULE(Softmax);

}  // namespace lockstep::nn
