// The 2-D convolution kernels (NCHW, weight [O, C / groups, kH, kW]): forward, backward-data and
// backward-weight (+bias), for lockstep's own layers (nn/conv.cpp checks the user's input and records
// the graph). Two implementations behind one parameter struct (tensor/conv_params.h):
// - the backend's direct kernels (Backend::conv2d, where supports(Capability::kConv2d, dtype)): on the
//   CPU oneDNN's (tensor/cpu/conv2d_onednn.cpp) for float32, and for bfloat16 where the processor has
//   AVX512-BF16 (BENCHMARKS.md, op_bench's conv2d rows: faster than im2col on every ResNet-20 and
//   cnn_fashion layer but the 1x1 projections, where they tie);
// - im2col through views plus GEMMs (tensor/conv2d.cpp) for every other device and dtype, empty
//   batches, and as the reference the direct kernels are tested against. bfloat16 without a direct
//   kernel is computed in float32 and rounded once.
#pragma once

#include "tensor/conv_params.h"
#include "tensor/tensor.h"

namespace lockstep::internal {

// The kernels take 4-D tensors of one dtype and device with channels that match (nn::functional::conv2d
// checks that, naming the user's shapes); any layout, they make operands contiguous. Results are new
// contiguous tensors.

// y [N, O, OH, OW] = conv(x [N, C, H, W], weight) + bias [O] (bias may be undefined).
Tensor conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

// dL/dx [input_shape] from dL/dy [N, O, OH, OW]: the transposed convolution of grad_y with weight.
Tensor conv2d_backward_data(const Tensor& grad_y, const Tensor& weight, const Shape& input_shape,
                            const Conv2dParams& p);

// dL/dweight [weight_shape] and, with `want_bias`, dL/dbias [O] (= grad_y summed over N, OH, OW;
// undefined otherwise).
struct Conv2dWeightGrads {
  Tensor weight, bias;
};
Conv2dWeightGrads conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Shape& weight_shape,
                                         bool want_bias, const Conv2dParams& p);

// All of backward at once, as autograd needs it: each gradient only where wanted (else undefined).
// Shares work between the two kernels (oneDNN reorders grad_y into its layout once).
struct Conv2dGrads {
  Tensor input, weight, bias;
};
Conv2dGrads conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, bool want_input,
                            bool want_weight, bool want_bias, const Conv2dParams& p);

}  // namespace lockstep::internal
