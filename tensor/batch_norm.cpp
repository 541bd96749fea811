// Batch normalization in the ops layer (tensor/batch_norm.h): checks, dtype conversion (statistics in
// float64; weight and bias in the input's compute dtype) and contiguous operands for the backend's four
// batch-norm kernels. Both devices' kernels take bfloat16 and float16 inputs and gradients as they are
// (computed in float32, each output rounded once).
//
// The statistics are one pass of sums of x and x^2 in double rather than Welford's mean and M2: sums
// from every rank add up by a plain SUM all-reduce (SyncBatchNorm), where (mean, M2) pairs need a merge.
// The price is var = E[x^2] - E[x]^2, which cancels: its relative error is about 2^-53 (mean / std)^2,
// below float32's 2^-24 until |mean| exceeds about 10^4 standard deviations.
#include "tensor/batch_norm.h"

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {
namespace {

struct Dims {
  int64_t N, C, inner;
};

Dims check_input(const Tensor& x, const char* op) {
  check_defined(x, op);
  check_floating(x, op);
  LOCKSTEP_CHECK(x.dim() >= 2, op, ": expected input [N, C, ...], got ", x.shape());
  const int64_t N = x.size(0), C = x.size(1);
  return {N, C, N * C != 0 ? x.numel() / (N * C) : 0};
}

// A per-channel tensor [C] (or [2, C] `rows`) on x's device, as `dtype`, contiguous; undefined stays so.
Tensor per_channel(const Tensor& t, const Tensor& x, Dtype dtype, const char* op, const char* what, int64_t rows = 1) {
  if (!t.defined()) return t;
  const Shape want = rows == 1 ? Shape{x.size(1)} : Shape{rows, x.size(1)};
  LOCKSTEP_CHECK(t.shape() == want, op, ": input ", x.shape(), " has ", x.size(1), " channels but ", what,
                 " has shape ", t.shape());
  check_same_device(x, t, op);
  return contiguous(to_dtype(t, dtype));
}

// The dtype the kernels compute x in, and take the weight and bias in: float32 for a 16-bit x.
Dtype compute_dtype(const Tensor& x) { return is_reduced_floating_point(x.dtype()) ? kFloat32 : x.dtype(); }

}  // namespace

Tensor batch_norm_stats(const Tensor& x_in) {
  const Dims d = check_input(x_in, "batch_norm_stats");
  Tensor x = contiguous(x_in);
  Tensor sums(Shape{2, d.C}, kFloat64, x.device());
  backend_for(x.device()).batch_norm_stats(sums, x, d.N, d.C, d.inner);
  return sums;
}

BatchNormMoments batch_norm_moments(const Tensor& sums, double count, double eps) {
  LOCKSTEP_CHECK(sums.defined() && sums.dim() == 2 && sums.size(0) == 2, "batch_norm_moments: expected sums [2, C], got ",
                 sums.defined() ? sums.shape() : Shape{});
  LOCKSTEP_CHECK(count > 0, "batch_norm_moments: count must be positive, got ", count);
  Tensor s = to_dtype(sums, kFloat64);
  Tensor mean = mul(select(s, 0, 0), 1 / count);
  Tensor var = relu(sub(mul(select(s, 0, 1), 1 / count), mul(mean, mean)));
  return {mean, var, unary(UnaryOp::Rsqrt, add(var, eps))};
}

Tensor batch_norm_elemt(const Tensor& x_in, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias) {
  const char* op = "batch_norm";
  const Dims d = check_input(x_in, op);
  Tensor x = contiguous(x_in);
  LOCKSTEP_CHECK(mean.defined() && invstd.defined(), op, ": mean and invstd are needed");
  Tensor m = per_channel(mean, x, kFloat64, op, "the mean"), is = per_channel(invstd, x, kFloat64, op, "invstd");
  const Dtype wt = compute_dtype(x);
  Tensor w = per_channel(weight, x, wt, op, "the weight"), b = per_channel(bias, x, wt, op, "the bias");
  Tensor y(x_in.shape(), x.dtype(), x.device());
  backend_for(x.device()).batch_norm_elemt(y, x, m, is, w, b, d.N, d.C, d.inner);
  return y;
}

Tensor batch_norm_backward_reduce(const Tensor& grad_y, const Tensor& x_in, const Tensor& mean) {
  const char* op = "batch_norm_backward";
  const Dims d = check_input(x_in, op);
  LOCKSTEP_CHECK(grad_y.defined() && grad_y.shape() == x_in.shape(), op, ": gradient ",
                 grad_y.defined() ? grad_y.shape() : Shape{}, " does not match input ", x_in.shape());
  Tensor x = contiguous(x_in), gy = contiguous(to_dtype(grad_y, x.dtype()));
  Tensor sums(Shape{2, d.C}, kFloat64, x.device());
  backend_for(x.device()).batch_norm_backward_reduce(sums, gy, x, per_channel(mean, x, kFloat64, op, "the mean"), d.N,
                                                     d.C, d.inner);
  return sums;
}

Tensor batch_norm_backward_elemt(const Tensor& grad_y, const Tensor& x_in, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sums, double count) {
  const char* op = "batch_norm_backward";
  const Dims d = check_input(x_in, op);
  LOCKSTEP_CHECK(grad_y.defined() && grad_y.shape() == x_in.shape(), op, ": gradient ",
                 grad_y.defined() ? grad_y.shape() : Shape{}, " does not match input ", x_in.shape());
  Tensor x = contiguous(x_in), gy = contiguous(to_dtype(grad_y, x.dtype()));
  Tensor gx(x_in.shape(), x.dtype(), x.device());
  backend_for(x.device()).batch_norm_backward_elemt(
      gx, gy, x, per_channel(mean, x, kFloat64, op, "the mean"), per_channel(invstd, x, kFloat64, op, "invstd"),
      per_channel(weight, x, compute_dtype(x), op, "the weight"), per_channel(sums, x, kFloat64, op, "the sums", 2), count, d.N, d.C,
      d.inner);
  return gx;
}

}  // namespace lockstep::internal
