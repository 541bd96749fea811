// F::grid_sample, as torch.nn.functional.grid_sample: input [N, C, H, W] (or [N, C, D, H, W]) read at the
// grid's normalized positions, grid [N, Ho, Wo, 2] (or [N, Do, Ho, Wo, 3]) with x (width) first, each in
// [-1, 1] from the first pixel to the last (their centres with align_corners, their outer edges without):
//   Tensor y = F::grid_sample(x, F::affine_grid(theta, {N, C, H, W}),
//                             F::GridSampleFuncOptions().mode(nn::kBilinear).padding_mode(nn::kBorder));
// Differentiable in the input and in the grid (bilinear and bicubic; nearest's grid gradient is zero).
#pragma once

#include <optional>
#include <variant>

#include "nn/options.h"
#include "nn/upsampling.h"
#include "tensor/tensor.h"

namespace lockstep::nn {

// Where a position outside the input reads: zero, the nearest border pixel, or the input reflected at its
// border (LibTorch's tags torch::kZeros, kBorder, kReflection).
namespace enumtype {
struct kZeros {};
struct kBorder {};
struct kReflection {};
}  // namespace enumtype
inline constexpr enumtype::kZeros kZeros{};
inline constexpr enumtype::kBorder kBorder{};
inline constexpr enumtype::kReflection kReflection{};

namespace functional {

// mode: kBilinear (trilinear on 5-D input, as PyTorch's "bilinear"), kNearest or kBicubic (4-D only).
struct GridSampleFuncOptions {
  using padding_mode_t = std::variant<enumtype::kZeros, enumtype::kBorder, enumtype::kReflection>;
  LOCKSTEP_ARG(InterpolateMode, mode, InterpolateMode::Bilinear);
  LOCKSTEP_ARG(padding_mode_t, padding_mode, enumtype::kZeros{});
  LOCKSTEP_ARG(std::optional<bool>, align_corners, std::nullopt);  // false when unset, as PyTorch's
};

Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleFuncOptions& options = {});

}  // namespace functional
}  // namespace lockstep::nn
