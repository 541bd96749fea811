// The 2-D convolution kernels (NCHW, weight [O, C / groups, kH, kW]): forward, backward-data and
// backward-weight (+bias), for lockstep's own layers (nn/conv.cpp checks the user's input and records
// the graph). Two implementations behind one parameter struct:
// - oneDNN's direct convolutions (tensor/cpu/conv2d_onednn.cpp) for float32 on the CPU: forward +
//   backward 1.2-2x faster than im2col on ResNet-20's and cnn_fashion's layers (bench/op_bench's
//   conv2d_*_im2col and _onednn rows), except the small 1x1 stride-2 projections, where the two are
//   within noise of each other; and for bfloat16 (autocast's conv2d) where the processor has
//   AVX512-BF16: bf16 operands and results, float32 accumulation, forward + backward faster than
//   computing them on float32 copies on every one of those layers (0.44-0.91x the best time; op_bench's
//   _bf16_onednn and _bf16_via_f32 rows, Zen 4, BENCHMARKS.md);
// - im2col through views plus GEMMs (tensor/conv2d.cpp) for CUDA, float64, empty batches, and as the
//   reference the oneDNN path is tested against. bfloat16 elsewhere is computed in float32 (oneDNN or
//   im2col) and rounded once.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/tensor.h"

namespace lockstep::internal {

enum class Conv2dAlgo {
  Auto,    // oneDNN where it applies (float32 on the CPU, non-empty), else im2col
  Im2col,  // always im2col (the reference)
  OneDNN,  // oneDNN; an error where it does not apply
};

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  Conv2dAlgo algo = Conv2dAlgo::Auto;

  // The output's spatial size for an H x W input and a kh x kw kernel (the input must be large enough).
  std::array<int64_t, 2> output_size(int64_t H, int64_t W, int64_t kh, int64_t kw) const;
};

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
