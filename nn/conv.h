// Conv2d, as torch.nn.Conv2d: im2col (a strided view of the padded input) and one batched matmul.
#pragma once

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  LOCKSTEP_ARG(int64_t, in_channels, 0);
  LOCKSTEP_ARG(int64_t, out_channels, 0);
  LOCKSTEP_ARG(ExpandingArray<2>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, stride, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<2>, dilation, 1);
  LOCKSTEP_ARG(int64_t, groups, 1);
  LOCKSTEP_ARG(bool, bias, true);
};

class Conv2dImpl : public Module {
 public:
  // weight [out, in / groups, kH, kW] and bias [out], PyTorch's defaults: kaiming_uniform(a = sqrt(5))
  // and U(±1/sqrt(fan_in)), fan_in = in / groups * kH * kW.
  explicit Conv2dImpl(const Conv2dOptions& options);
  Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  void reset_parameters();
  Tensor forward(const Tensor& input);  // [N, in, H, W] or [in, H, W]

  Conv2dOptions options;
  Tensor weight;
  Tensor bias;  // undefined without bias
};
LOCKSTEP_MODULE(Conv2d);

}  // namespace lockstep::nn
