// Resizing, as torch.nn.functional.interpolate and torch.nn.Upsample (with Python's UpsamplingNearest2d and
// UpsamplingBilinear2d), with LibTorch's options:
//   F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{8, 8}).mode(nn::kBilinear)
//                         .align_corners(false))
//   nn::Upsample(nn::UpsampleOptions().scale_factor(std::vector<double>{2, 2}).mode(nn::kNearest))
// Input [N, C, d1, ..., dK], K = 1 (linear), 2 (bilinear, bicubic) or 3 (trilinear); nearest, nearest-exact
// and area take any K of 1 to 3. Each spatial dimension is resampled on its own, as a composition of
// index_select, mul and sum (nn/upsampling.cpp), so the gradient is index_select's and every device runs it.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <vector>

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

// interpolate's modes: LibTorch's torch::kNearest ... torch::kArea, spelled nn::kNearest ... nn::kArea.
enum class InterpolateMode { Nearest, NearestExact, Linear, Bilinear, Bicubic, Trilinear, Area };
inline constexpr InterpolateMode kNearest = InterpolateMode::Nearest;
inline constexpr InterpolateMode kNearestExact = InterpolateMode::NearestExact;
inline constexpr InterpolateMode kLinear = InterpolateMode::Linear;
inline constexpr InterpolateMode kBilinear = InterpolateMode::Bilinear;
inline constexpr InterpolateMode kBicubic = InterpolateMode::Bicubic;
inline constexpr InterpolateMode kTrilinear = InterpolateMode::Trilinear;
inline constexpr InterpolateMode kArea = InterpolateMode::Area;
// PyTorch's name of the mode: "nearest", "nearest-exact", "linear", ...
const char* mode_name(InterpolateMode mode);
inline std::ostream& operator<<(std::ostream& os, InterpolateMode mode) { return os << mode_name(mode); }

namespace functional {

// Exactly one of size and scale_factor, each with one value per spatial dimension (or a single value for
// all of them, as Python's int / float). The output size is size, or floor(input size * scale_factor);
// the coordinate map then uses 1 / scale_factor unless recompute_scale_factor is true (then input /
// output size, as when size was given). align_corners only for the linear modes and bicubic (default
// false); antialias only for bilinear and bicubic on 4-D input (PyTorch's triangle and Keys a = -0.5
// filters, widened by the downsampling factor).
struct InterpolateFuncOptions {
  LOCKSTEP_ARG(std::optional<std::vector<int64_t>>, size, std::nullopt);
  LOCKSTEP_ARG(std::optional<std::vector<double>>, scale_factor, std::nullopt);
  LOCKSTEP_ARG(InterpolateMode, mode, InterpolateMode::Nearest);
  LOCKSTEP_ARG(std::optional<bool>, align_corners, std::nullopt);
  LOCKSTEP_ARG(std::optional<bool>, recompute_scale_factor, std::nullopt);
  LOCKSTEP_ARG(bool, antialias, false);
};

// Source positions, per output position o along one dimension (input in, output out; s the scale):
//   nearest:        floor(o * s), s = in / out or 1 / scale_factor, in float32 as PyTorch's
//   nearest-exact:  floor((o + 0.5) * s)
//   linear modes:   (o + 0.5) s - 0.5 clamped at 0, or o (in - 1) / (out - 1) with align_corners; two taps
//   bicubic:        the same unclamped, four taps at floor - 1 ... floor + 2 clamped to the border, A = -0.75
//   area:           the mean over [floor(o in / out), ceil((o + 1) in / out)), as adaptive_avg_pool
// all indices clamped to in - 1. Gradients are those of these sums; where PyTorch's native bicubic backward
// copies the gradient because the sizes match while its forward resampled by 1 / scale_factor, this one
// agrees with the forward (and with PyTorch's Python decomposition).
Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& options = {});
// The sampling grid of the affine maps theta ([N, 2, 3] for size [N, C, H, W], [N, 3, 4] for [N, C, D, H,
// W]): grid[n, h, w] = theta[n] (x_w, y_h, 1), coordinates in [-1, 1] (pixel centres without
// align_corners, corner pixels' centres with it); [N, H, W, 2] or [N, D, H, W, 3], as torch's affine_grid.
Tensor affine_grid(const Tensor& theta, const std::vector<int64_t>& size, bool align_corners = false);

}  // namespace functional

// nn::Upsample's options, as LibTorch's (mode kNearest, kLinear, kBilinear, kBicubic or kTrilinear).
struct UpsampleOptions {
  LOCKSTEP_ARG(std::optional<std::vector<int64_t>>, size, std::nullopt);
  LOCKSTEP_ARG(std::optional<std::vector<double>>, scale_factor, std::nullopt);
  LOCKSTEP_ARG(InterpolateMode, mode, InterpolateMode::Nearest);
  LOCKSTEP_ARG(std::optional<bool>, align_corners, std::nullopt);
};

class UpsampleImpl : public Module {
 public:
  explicit UpsampleImpl(const UpsampleOptions& options = {}) : Module("Upsample"), options(options) {}
  Tensor forward(const Tensor& input);
  UpsampleOptions options;
};
LOCKSTEP_MODULE(Upsample);

// Python's UpsamplingNearest2d (mode nearest) and UpsamplingBilinear2d (bilinear, align_corners=True), which
// LibTorch lacks; input [N, C, H, W].
struct UpsamplingOptions {
  LOCKSTEP_ARG(std::optional<std::vector<int64_t>>, size, std::nullopt);
  LOCKSTEP_ARG(std::optional<std::vector<double>>, scale_factor, std::nullopt);
};
using UpsamplingNearest2dOptions = UpsamplingOptions;
using UpsamplingBilinear2dOptions = UpsamplingOptions;

class UpsamplingNearest2dImpl : public Module {
 public:
  explicit UpsamplingNearest2dImpl(const UpsamplingOptions& options = {})
      : Module("UpsamplingNearest2d"), options(options) {}
  Tensor forward(const Tensor& input);
  UpsamplingOptions options;
};
LOCKSTEP_MODULE(UpsamplingNearest2d);

class UpsamplingBilinear2dImpl : public Module {
 public:
  explicit UpsamplingBilinear2dImpl(const UpsamplingOptions& options = {})
      : Module("UpsamplingBilinear2d"), options(options) {}
  Tensor forward(const Tensor& input);
  UpsamplingOptions options;
};
LOCKSTEP_MODULE(UpsamplingBilinear2d);

}  // namespace lockstep::nn
