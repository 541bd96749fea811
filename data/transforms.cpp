// Normalize's arithmetic and checks (the other transforms are a line each, in the header).
#include "data/transforms.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::data::transforms::detail {

void check_normalize_args(const std::vector<double>& mean, const std::vector<double>& stddev) {
  LOCKSTEP_CHECK(!mean.empty() && !stddev.empty(), "Normalize: mean and stddev need at least one value each, got ",
                 mean.size(), " and ", stddev.size());
  // One value broadcasts over every channel; otherwise both have one per channel.
  LOCKSTEP_CHECK(mean.size() == stddev.size() || mean.size() == 1 || stddev.size() == 1,
                 "Normalize: mean ", mean, " and stddev ", stddev, " have different channel counts");
  for (double s : stddev) {
    LOCKSTEP_CHECK(s != 0 && std::isfinite(s), "Normalize: stddev ", stddev,
                   " has a zero or non-finite value, which would divide by zero");
  }
}

Tensor normalize(const Tensor& input, const std::vector<double>& mean, const std::vector<double>& stddev) {
  LOCKSTEP_CHECK(input.defined(), "Normalize: the example's input is undefined");
  LOCKSTEP_CHECK(input.is_floating_point(), "Normalize: expected a floating-point input, got ",
                 dtype_name(input.dtype()), " ", input.shape(), " (convert it first, e.g. with a TensorLambda)");
  const int64_t channels = static_cast<int64_t>(std::max(mean.size(), stddev.size()));
  if (channels == 1) {
    // One value for every element: scalar ops, so any shape (a scalar included) works.
    Tensor centered = internal::binary_scalar(BinaryOp::Sub, input, mean[0]);
    return internal::binary_scalar(BinaryOp::Div, centered, stddev[0]);
  }
  LOCKSTEP_CHECK(input.dim() >= 1 && input.size(0) == channels, "Normalize: mean ", mean, " and stddev ", stddev,
                 " give ", channels, " channels, but the input ", input.shape(),
                 " has ", input.dim() >= 1 ? input.size(0) : 0, " along its channel dimension (dim 0)");
  // mean and stddev as [C, 1, ..., 1] in the input's dtype and on its device, broadcast over [C, ...].
  Shape per_channel(std::vector<int64_t>(input.dim(), 1));
  per_channel[0] = channels;
  auto as_channels = [&](const std::vector<double>& v) {
    std::vector<double> full(channels, v[0]);
    if (v.size() > 1) full = v;
    return internal::to_device(internal::to_dtype(tensor(full, per_channel), input.dtype()), input.device());
  };
  return internal::div(internal::sub(input, as_channels(mean)), as_channels(stddev));
}

}  // namespace lockstep::data::transforms::detail
