// The convolution family's oneDNN implementation (tensor/conv2d.h): float32 on the CPU, and bfloat16
// where the processor has AVX512-BF16. Every operand of a call has one dtype.
#pragma once

#include "tensor/conv2d.h"

namespace lockstep::cpu {

// Whether oneDNN takes this operand: float32 (or bfloat16 with AVX512-BF16) on the CPU, no empty dimension.
bool onednn_conv2d_applies(const Tensor& t);

Tensor onednn_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const internal::Conv2dParams& p);
Tensor onednn_conv2d_backward_data(const Tensor& grad_y, const Tensor& weight, const Shape& input_shape,
                                   const internal::Conv2dParams& p);
internal::Conv2dWeightGrads onednn_conv2d_backward_weight(const Tensor& grad_y, const Tensor& x,
                                                          const Shape& weight_shape, bool want_bias,
                                                          const internal::Conv2dParams& p);

internal::Conv2dGrads onednn_conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                                             bool want_input, bool want_weight, bool want_bias,
                                             const internal::Conv2dParams& p);

}  // namespace lockstep::cpu
