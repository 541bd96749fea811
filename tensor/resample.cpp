// One dimension's resampling through the backend's fused kernels (Backend::resample, where it supports
// Capability::kResample): F::interpolate resamples a dimension at a time, and as index_select, a
// broadcast product and a sum over the taps it wrote and read the taps' gathered copy each way (bilinear
// 2x forward + backward at 2.6x PyTorch's time). The ops layer checks the taps and the operands here and
// views x as [outer, in, inner]; nn/upsampling.cpp computes the taps and composes where unsupported.
#include "tensor/backend.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

ResampleArgs args_of(const Shape& shape, int64_t dim, int64_t out, const ResampleTaps& taps, const char* op) {
  LOCKSTEP_CHECK(dim >= 0 && dim < static_cast<int64_t>(shape.size()), op, ": dimension ", dim, " out of range for ",
                 shape);
  LOCKSTEP_CHECK(taps.taps >= 1 && out >= 0 && static_cast<int64_t>(taps.index.size()) == out * taps.taps &&
                     (taps.weight.empty() || taps.weight.size() == taps.index.size()),
                 op, ": ", taps.index.size(), " indices and ", taps.weight.size(), " weights for ", out,
                 " outputs of ", taps.taps, " taps");
  ResampleArgs a{.outer = 1, .in = shape[dim], .out = out, .inner = 1, .taps = taps.taps,
                 .index = taps.index.data(), .weight = taps.weight.empty() ? nullptr : taps.weight.data()};
  for (int64_t d = 0; d < dim; ++d) a.outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) a.inner *= shape[d];
  for (int64_t i : taps.index)
    LOCKSTEP_CHECK(i >= 0 && i < a.in, op, ": tap index ", i, " out of range for size ", a.in, " of ", shape);
  return a;
}

void check_supported(const Tensor& t, const char* op) {
  check_defined(t, op);
  LOCKSTEP_CHECK(supports(t.device(), Capability::kResample, t.dtype()), op, ": the ", t.device(),
                 " backend has no kernel for ", dtype_name(t.dtype()), " (ask supports(kResample) first)");
}

}  // namespace

Tensor resample(const Tensor& x_in, int64_t dim, int64_t out, const ResampleTaps& taps) {
  check_supported(x_in, "resample");
  const ResampleArgs a = args_of(x_in.shape(), dim, out, taps, "resample");
  Shape shape = x_in.shape();
  shape[dim] = out;
  Tensor x = contiguous(x_in), y(shape, x.dtype(), x.device());
  if (y.numel() > 0) backend_for(x.device()).resample(y, x, a);
  return y;
}

Tensor resample_backward(const Tensor& grad_y, const Shape& x_shape, int64_t dim, const ResampleTaps& taps) {
  check_supported(grad_y, "resample_backward");
  LOCKSTEP_CHECK(taps.taps >= 1 && dim >= 0 && dim < static_cast<int64_t>(x_shape.size()),
                 "resample_backward: dimension ", dim, " of ", x_shape, " with ", taps.taps, " taps");
  Shape want = x_shape;
  want[dim] = static_cast<int64_t>(taps.index.size()) / taps.taps;
  LOCKSTEP_CHECK(grad_y.shape() == want, "resample_backward: gradient ", grad_y.shape(), " for an output of ", want);
  const ResampleArgs a = args_of(x_shape, dim, want[dim], taps, "resample_backward");
  Tensor gy = contiguous(grad_y), gx(x_shape, gy.dtype(), gy.device());
  if (gx.numel() == 0) return gx;
  if (gy.numel() == 0) return zeros_like(gx);
  backend_for(gy.device()).resample_backward(gx, gy, a);
  return gx;
}

}  // namespace lockstep::internal
