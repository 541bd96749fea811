// Linear: y = x W^T + b, as torch.nn.Linear, with PyTorch's default initialisation.
#pragma once

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  LOCKSTEP_ARG(int64_t, in_features, 0);
  LOCKSTEP_ARG(int64_t, out_features, 0);
  LOCKSTEP_ARG(bool, bias, true);
};

class LinearImpl : public Module {
 public:
  // weight [out, in] and bias [out] uniform in ±1/sqrt(in) (kaiming_uniform with a = sqrt(5), as
  // PyTorch), drawn from the default generator; float32 on the CPU (move with to()).
  explicit LinearImpl(const LinearOptions& options);
  LinearImpl(int64_t in_features, int64_t out_features) : LinearImpl(LinearOptions(in_features, out_features)) {}
  void reset_parameters();
  Tensor forward(const Tensor& input);  // input [..., in] -> [..., out]
  void pretty_print(std::ostream& os) const override;

  LinearOptions options;
  int64_t in_features, out_features;
  Tensor weight;
  Tensor bias;  // undefined without bias
};
LOCKSTEP_MODULE(Linear);

// Identity: returns its input (a placeholder in a Sequential).
class IdentityImpl : public Module {
 public:
  IdentityImpl() : Module("Identity") {}
  Tensor forward(const Tensor& input) { return input; }
};
LOCKSTEP_MODULE(Identity);

}  // namespace lockstep::nn
