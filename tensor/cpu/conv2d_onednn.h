// The CPU backend's direct 2-D convolutions (Backend::conv2d, tensor/conv2d.h's shapes) through oneDNN:
// float32, and bfloat16 where the processor has AVX512-BF16. Contiguous operands of one dtype, none
// empty; outputs allocated by the caller.
#pragma once

#include "tensor/conv_params.h"
#include "tensor/tensor.h"

namespace lockstep::cpu {

// Whether oneDNN's kernels take this dtype here (Capability::kConv2d on the CPU).
bool onednn_conv2d_supports(Dtype dtype);

void onednn_conv2d(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const internal::Conv2dParams& p);
// Each gradient where defined (Backend::conv2d_backward's contract); with both, grad_y is reordered into
// oneDNN's layout once.
void onednn_conv2d_backward(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_y,
                            const Tensor& x, const Tensor& weight, const internal::Conv2dParams& p);

}  // namespace lockstep::cpu
