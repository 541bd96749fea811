// F::pixel_shuffle, F::pixel_unshuffle and Unflatten: reshapes and a permute, so their gradients are the
// inverse rearrangements.
#include "nn/reshape_layers.h"

#include "tensor/ops.h"

namespace lockstep::nn {

namespace {

// The dimensions of `x` before its last `k` (the batch dimensions of the pixel shuffles).
Shape leading(const Tensor& x, int64_t k) { return Shape(x.shape().begin(), x.shape().end() - k); }

Shape with(Shape s, std::initializer_list<int64_t> tail) {
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

// The permutation keeping b batch dimensions and reordering the ones after them as `order` says.
std::vector<int64_t> after_batch(int64_t b, std::initializer_list<int64_t> order) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < b; ++i) dims.push_back(i);
  for (int64_t o : order) dims.push_back(b + o);
  return dims;
}

}  // namespace

namespace functional {

Tensor pixel_shuffle(const Tensor& x, const PixelShuffleFuncOptions& options) {
  const int64_t r = options.upscale_factor();
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 3,
                 "pixel_shuffle expects input to have at least 3 dimensions, but got input with ",
                 x.defined() ? x.dim() : 0, " dimension(s)");
  LOCKSTEP_CHECK(r > 0, "pixel_shuffle expects a positive upscale_factor, but got ", r);
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  LOCKSTEP_CHECK(c % (r * r) == 0,
                 "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                 "upscale_factor, but input.size(-3)=",
                 c, " is not divisible by ", r * r);
  const Shape batch = leading(x, 3);
  const auto b = static_cast<int64_t>(batch.size());
  // [*, C r r, H, W] -> [*, C, r, r, H, W] -> [*, C, H, r, W, r] -> [*, C, H r, W r]
  Tensor y = reshape(x, with(batch, {c / (r * r), r, r, h, w}));
  y = permute(y, after_batch(b, {0, 3, 1, 4, 2}));
  return reshape(y, with(batch, {c / (r * r), h * r, w * r}));
}

Tensor pixel_unshuffle(const Tensor& x, const PixelUnshuffleFuncOptions& options) {
  const int64_t r = options.downscale_factor();
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 3,
                 "pixel_unshuffle expects input to have at least 3 dimensions, but got input with ",
                 x.defined() ? x.dim() : 0, " dimension(s)");
  LOCKSTEP_CHECK(r > 0, "pixel_unshuffle expects a positive downscale_factor, but got ", r);
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  LOCKSTEP_CHECK(h % r == 0,
                 "pixel_unshuffle expects height to be divisible by downscale_factor, but input.size(-2)=",
                 h, " is not divisible by ", r);
  LOCKSTEP_CHECK(w % r == 0,
                 "pixel_unshuffle expects width to be divisible by downscale_factor, but input.size(-1)=",
                 w, " is not divisible by ", r);
  const Shape batch = leading(x, 3);
  const auto b = static_cast<int64_t>(batch.size());
  // [*, C, H r, W r] -> [*, C, H, r, W, r] -> [*, C, r, r, H, W] -> [*, C r r, H, W]
  Tensor y = reshape(x, with(batch, {c, h / r, r, w / r, r}));
  y = permute(y, after_batch(b, {0, 2, 4, 1, 3}));
  return reshape(y, with(batch, {c * r * r, h / r, w / r}));
}

}  // namespace functional

Tensor UnflattenImpl::forward(const Tensor& x) {
  LOCKSTEP_CHECK(x.defined(), "unflatten: got an undefined tensor");
  const std::vector<int64_t>& sizes = options.sizes();
  const int64_t d = internal::wrap_dim(options.dim(), x.dim(), "unflatten");
  LOCKSTEP_CHECK(!sizes.empty(), "unflatten: sizes must be non-empty");
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      LOCKSTEP_CHECK(inferred < 0, "unflatten: only one dimension can be inferred, got sizes ", Shape(sizes));
      inferred = static_cast<int64_t>(i);
    } else {
      LOCKSTEP_CHECK(sizes[i] >= 0, "unflatten: invalid size ", sizes[i], " in ", Shape(sizes));
      known *= sizes[i];
    }
  }
  const int64_t n = x.size(d);
  Shape s(x.shape().begin(), x.shape().begin() + d);
  s.insert(s.end(), sizes.begin(), sizes.end());
  s.insert(s.end(), x.shape().begin() + d + 1, x.shape().end());
  const bool fits = inferred < 0 ? known == n : (known == 0 ? n == 0 : n % known == 0);
  LOCKSTEP_CHECK(fits, "unflatten: Provided sizes ", Shape(sizes), " don't multiply up to the size of dim ",
                 options.dim(), " (", n, ") in the input tensor");
  if (inferred >= 0) s[static_cast<size_t>(d + inferred)] = known == 0 ? 0 : n / known;
  return reshape(x, s);
}

}  // namespace lockstep::nn
