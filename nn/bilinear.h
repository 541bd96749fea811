// Bilinear, as torch.nn.Bilinear: y = x1^T A x2 + b for each output feature, with LibTorch's options
//   nn::Bilinear(nn::BilinearOptions(20, 30, 40).bias(false))    F::bilinear(x1, x2, weight, bias)
#pragma once

#include "autograd/functions.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct BilinearOptions {
  BilinearOptions(int64_t in1_features, int64_t in2_features, int64_t out_features)
      : in1_features_(in1_features), in2_features_(in2_features), out_features_(out_features) {}
  LOCKSTEP_ARG(int64_t, in1_features, 0);
  LOCKSTEP_ARG(int64_t, in2_features, 0);
  LOCKSTEP_ARG(int64_t, out_features, 0);
  LOCKSTEP_ARG(bool, bias, true);
};

namespace functional {
// input1 [..., in1], input2 [..., in2] (the same leading dimensions), weight [out, in1, in2], bias [out]
// or undefined -> [..., out]: y_o = sum_ij x1_i weight_oij x2_j + bias_o.
Tensor bilinear(const Tensor& input1, const Tensor& input2, const Tensor& weight, const Tensor& bias = Tensor());
}  // namespace functional

class BilinearImpl : public Module {
 public:
  // weight [out, in1, in2] and bias [out] uniform in +-1/sqrt(in1), as PyTorch's reset_parameters.
  explicit BilinearImpl(const BilinearOptions& options);
  BilinearImpl(int64_t in1_features, int64_t in2_features, int64_t out_features)
      : BilinearImpl(BilinearOptions(in1_features, in2_features, out_features)) {}
  void reset_parameters();
  Tensor forward(const Tensor& input1, const Tensor& input2);

  BilinearOptions options;
  Tensor weight;
  Tensor bias;  // undefined without bias
};
LOCKSTEP_MODULE(Bilinear);

}  // namespace lockstep::nn
