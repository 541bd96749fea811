// Batch normalization in the ops layer, split as PyTorch's batch_norm_stats / batch_norm_elemt /
// batch_norm_backward_reduce / batch_norm_backward_elemt, so that SyncBatchNorm can all-reduce the
// per-channel sums between the passes. x is [N, C, *] (any layout: made contiguous), float32, float64
// or bfloat16 (computed in float32). Per-channel statistics are float64 tensors on x's device: the sums
// accumulate in double and add up across ranks by a SUM all-reduce.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace lockstep::internal {

// [2, C] float64: sum over N and * of x, and of x * x, per channel, in one pass over x.
Tensor batch_norm_stats(const Tensor& x);

// Per-channel mean and invstd = 1 / sqrt(biased variance + eps), both [C] float64, from
// batch_norm_stats' sums over `count` values per channel; also the biased variance, for the running
// statistics. var = sum(x^2) / count - mean^2, clamped at 0 (double: exact enough, see batch_norm.cpp).
struct BatchNormMoments {
  Tensor mean, var, invstd;
};
BatchNormMoments batch_norm_moments(const Tensor& sums, double count, double eps);

// y = (x - mean) * invstd * weight + bias per channel: training (batch statistics) and eval (running
// ones) alike. mean and invstd [C] (any floating dtype); weight and bias [C] or undefined.
Tensor batch_norm_elemt(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias);

// [2, C] float64: sum of grad_y and of grad_y * (x - mean) per channel, in one pass. The bias
// gradient is row 0; the weight gradient is row 1 times invstd.
Tensor batch_norm_backward_reduce(const Tensor& grad_y, const Tensor& x, const Tensor& mean);

// grad_x = weight * invstd * (grad_y - sum_dy / count - (x - mean) * invstd^2 * sum_dy_xmu / count), with
// `sums` = batch_norm_backward_reduce's (all-reduced over ranks for SyncBatchNorm) and `count` the values
// per channel they cover. Eval mode (fixed statistics) passes undefined sums (zero):
// grad_x = grad_y * weight * invstd.
Tensor batch_norm_backward_elemt(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& weight, const Tensor& sums, double count);

}  // namespace lockstep::internal
