// Linear: y = x W^T + b, as torch.nn.Linear, with PyTorch's default initialisation.
#pragma once

#include "nn/module.h"

namespace lockstep::nn {

class Linear : public Module {
 public:
  // weight [out, in] and bias [out] uniform in ±1/sqrt(in) (kaiming_uniform with a = sqrt(5), as
  // PyTorch), drawn from the default generator on the host, then moved to `device`.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Dtype dtype = kFloat32,
         Device device = Device::cpu());
  Tensor forward(const Tensor& input) override;  // input [N, in] -> [N, out]

  int64_t in_features, out_features;
  Tensor weight;
  Tensor bias;  // undefined without bias
};

}  // namespace lockstep::nn
