// Layers that only rearrange elements, as torch.nn.PixelShuffle, PixelUnshuffle and Unflatten, with
// LibTorch's options and F:: forms:
//   nn::PixelShuffle(nn::PixelShuffleOptions(2))    F::pixel_unshuffle(x, 2)
//   nn::Unflatten(nn::UnflattenOptions(1, {2, 3}))
// Each is a reshape and, for the pixel shuffles, a permute: a view where the layout allows, and the
// gradient is the inverse rearrangement.
#pragma once

#include <vector>

#include "autograd/functions.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct PixelShuffleOptions {
  PixelShuffleOptions(int64_t upscale_factor) : upscale_factor_(upscale_factor) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, upscale_factor, 1);
};
struct PixelUnshuffleOptions {
  PixelUnshuffleOptions(int64_t downscale_factor) : downscale_factor_(downscale_factor) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, downscale_factor, 1);
};
// sizes replace dimension dim; one of them may be -1 (inferred).
struct UnflattenOptions {
  UnflattenOptions(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  LOCKSTEP_ARG(int64_t, dim, 0);
  LOCKSTEP_ARG(std::vector<int64_t>, sizes, {});
};

namespace functional {
using PixelShuffleFuncOptions = PixelShuffleOptions;
using PixelUnshuffleFuncOptions = PixelUnshuffleOptions;

// [*, C r^2, H, W] -> [*, C, H r, W r]: out[c, h r + i, w r + j] = in[c r^2 + i r + j, h, w].
Tensor pixel_shuffle(const Tensor& input, const PixelShuffleFuncOptions& options);
// [*, C, H r, W r] -> [*, C r^2, H, W], the inverse of pixel_shuffle.
Tensor pixel_unshuffle(const Tensor& input, const PixelUnshuffleFuncOptions& options);
}  // namespace functional

class PixelShuffleImpl : public Module {
 public:
  explicit PixelShuffleImpl(const PixelShuffleOptions& options) : Module("PixelShuffle"), options(options) {}
  Tensor forward(const Tensor& input) { return functional::pixel_shuffle(input, options); }
  PixelShuffleOptions options;
};
LOCKSTEP_MODULE(PixelShuffle);

class PixelUnshuffleImpl : public Module {
 public:
  explicit PixelUnshuffleImpl(const PixelUnshuffleOptions& options) : Module("PixelUnshuffle"), options(options) {}
  Tensor forward(const Tensor& input) { return functional::pixel_unshuffle(input, options); }
  PixelUnshuffleOptions options;
};
LOCKSTEP_MODULE(PixelUnshuffle);

class UnflattenImpl : public Module {
 public:
  explicit UnflattenImpl(const UnflattenOptions& options) : Module("Unflatten"), options(options) {}
  UnflattenImpl(int64_t dim, std::vector<int64_t> sizes) : UnflattenImpl(UnflattenOptions(dim, std::move(sizes))) {}
  // Dimension dim of size sizes[0] * sizes[1] * ... becomes the dimensions `sizes`, as torch.unflatten.
  Tensor forward(const Tensor& input);
  UnflattenOptions options;
};
LOCKSTEP_MODULE(Unflatten);

}  // namespace lockstep::nn
