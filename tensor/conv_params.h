// The parameters of a 2-D convolution (NCHW, weight [O, C / groups, kH, kW]), shared by the ops layer
// (tensor/conv2d.h) and the backends' direct kernels (tensor/backend.h) without either including the other.
#pragma once

#include <array>
#include <cstdint>

namespace lockstep::internal {

enum class Conv2dAlgo {
  Auto,    // the backend's direct kernel where it has one for these operands (Capability::kConv2d), else im2col
  Im2col,  // always im2col (the reference)
  OneDNN,  // the CPU's direct kernel (oneDNN); an error where it does not apply
};

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  Conv2dAlgo algo = Conv2dAlgo::Auto;

  // The output's spatial size for an H x W input and a kh x kw kernel (the input must be large enough).
  std::array<int64_t, 2> output_size(int64_t H, int64_t W, int64_t kh, int64_t kw) const {
    return {(H + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1,
            (W + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1};
  }
};

}  // namespace lockstep::internal
