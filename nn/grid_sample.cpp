// F::grid_sample composed from differentiable ops, by PyTorch's rules (ATen's GridSampler.h): each grid
// coordinate is unnormalized to a pixel position, moved inside by the padding mode (border: clamped;
// reflection: reflected about the borders, then clamped), and the input is read at the taps around it
// (bilinear: 2 per dimension, bicubic: 4 with Keys' A = -0.75 and the padding applied per tap, nearest:
// the nearest pixel, ties to even), a tap outside the input reading zero (so does a NaN coordinate). The taps are gathered from the
// input seen as [N, C, cells] (gather's backward adds the input's gradient back); the weights are
// computed from the grid with tensor ops, so its gradient is theirs (floor and rounding pass none).
#include "nn/grid_sample.h"

#include <array>
#include <cmath>

#include "autograd/functions.h"
#include "tensor/factory.h"

namespace lockstep::nn::functional {

namespace {

enum class Pad { Zeros, Border, Reflection };

// PyTorch's reflect_coordinates: x reflected into [twice_low / 2, twice_high / 2].
Tensor reflect(const Tensor& x, double twice_low, double twice_high) {
  if (twice_low == twice_high) return zeros_like(x);
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  Tensor a = abs(x - lo);
  Tensor flips = floor(a / span).detach(), extra = a - flips * span;  // fmod(a, span)
  Tensor odd = (flips - floor(flips / 2) * 2).ne(0.0);
  return where(odd, (span + lo) - extra, extra + lo);
}

// A coordinate inside [0, size - 1] by the padding mode (zeros: unchanged).
Tensor pad_coordinate(const Tensor& x, int64_t size, Pad pad, bool align_corners) {
  if (pad == Pad::Zeros) return x;
  Tensor r = x;
  if (pad == Pad::Reflection)
    r = align_corners ? reflect(x, 0, 2.0 * (size - 1)) : reflect(x, -1, 2.0 * size - 1);
  return clamp(r, 0.0, static_cast<double>(size - 1));
}

// A tap's pixel index from its coordinate (a whole number, or NaN / infinite from such a grid value):
// clamped a few pixels outside the input first, so that NaN and infinities read zero instead of reaching
// an undefined float-to-integer conversion.
Tensor tap_index(const Tensor& x, int64_t size) {
  const Tensor inside = clamp(x, -8.0, static_cast<double>(size + 8));
  return where(isnan(inside), full_like(inside, -8.0), inside).to(kInt64);
}

// Keys' cubic convolution weights (A = -0.75) of the four taps at t in [0, 1).
std::array<Tensor, 4> cubic_weights(const Tensor& t) {
  const double A = -0.75;
  auto near = [&](const Tensor& x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };          // |x| <= 1
  auto far = [&](const Tensor& x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };   // 1 < |x| < 2
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleFuncOptions& o) {
  LOCKSTEP_CHECK(input.defined() && grid.defined(), "grid_sample: got an undefined tensor");
  const int64_t d = input.dim() - 2;
  LOCKSTEP_CHECK((input.dim() == 4 || input.dim() == 5) && grid.dim() == input.dim() && grid.size(-1) == d &&
                     grid.size(0) == input.size(0),
                 "grid_sample: expected input [N, C, H, W] with grid [N, H_out, W_out, 2] or input [N, C, D, H, W] "
                 "with grid [N, D_out, H_out, W_out, 3], got input ", input.shape(), " and grid ", grid.shape());
  LOCKSTEP_CHECK(is_floating_point(input.dtype()) && grid.dtype() == input.dtype(), "grid_sample: expected grid to "
                 "have the same dtype as input (floating point), got input ", input.dtype(), " and grid ",
                 grid.dtype());
  LOCKSTEP_CHECK(grid.device() == input.device(), "grid_sample: expected input and grid on one device, got ",
                 input.device(), " and ", grid.device());
  const InterpolateMode mode = o.mode();
  LOCKSTEP_CHECK(mode == kBilinear || mode == kNearest || (mode == kBicubic && d == 2), "grid_sample: mode must be "
                 "bilinear, nearest or (for 4-D input) bicubic, got ", mode, " on ", input.dim(), "-D input");
  const Pad pad = std::holds_alternative<enumtype::kZeros>(o.padding_mode())    ? Pad::Zeros
                  : std::holds_alternative<enumtype::kBorder>(o.padding_mode()) ? Pad::Border
                                                                                : Pad::Reflection;
  const bool align_corners = o.align_corners().value_or(false);
  for (int64_t i = 2; i < input.dim(); ++i)
    LOCKSTEP_CHECK(input.size(i) > 0, "grid_sample: expected a non-empty spatial input, got ", input.shape());

  const int64_t N = input.size(0), C = input.size(1);
  Shape out_shape{N, C};
  for (int64_t i = 1; i <= d; ++i) out_shape.push_back(grid.size(i));
  int64_t cells = 1, L = 1;
  for (int64_t i = 2; i < input.dim(); ++i) cells *= input.size(i);
  for (int64_t i = 1; i <= d; ++i) L *= grid.size(i);
  const Tensor flat = input.reshape({N, C, cells});
  const Tensor g = grid.reshape({N, L, d});
  // Per spatial dimension k (input dim 2 + k; grid coordinate d - 1 - k), its size and pixel coordinate.
  std::vector<int64_t> size(d);
  std::vector<Tensor> pos(d);
  for (int64_t k = 0; k < d; ++k) {
    size[k] = input.size(2 + k);
    const Tensor c = g.select(2, d - 1 - k);  // [N, L]
    const double s = static_cast<double>(size[k]);
    Tensor x = align_corners ? (c + 1) * ((s - 1) / 2) : ((c + 1) * s - 1) / 2;
    pos[k] = mode == kBicubic ? x : pad_coordinate(x, size[k], pad, align_corners);
  }

  // taps[k]: (integer index [N, L] int64, weight [N, L] or undefined for 1) per tap along dimension k.
  struct Tap {
    Tensor index, weight;
  };
  std::vector<std::vector<Tap>> taps(d);
  for (int64_t k = 0; k < d; ++k) {
    if (mode == kNearest) {
      taps[k].push_back({tap_index(round(pos[k]).detach(), size[k]), Tensor()});
    } else if (mode == kBilinear) {
      Tensor lo = floor(pos[k]).detach(), t = pos[k] - lo;
      taps[k].push_back({tap_index(lo, size[k]), 1 - t});
      taps[k].push_back({tap_index(lo + 1, size[k]), t});
    } else {
      Tensor lo = floor(pos[k]).detach(), t = pos[k] - lo;
      const auto w = cubic_weights(t);
      for (int j = 0; j < 4; ++j) {
        // bicubic pads each tap's coordinate itself (PyTorch's get_value_bounded)
        Tensor at = pad_coordinate(lo + (j - 1), size[k], pad, align_corners).detach();
        taps[k].push_back({tap_index(pad == Pad::Zeros ? at : round(at), size[k]), w[j]});
      }
    }
  }

  // Every combination of one tap per dimension: gather the cells it reads, weighted, zero outside.
  Tensor out;
  std::vector<size_t> pick(d, 0);
  while (true) {
    Tensor lin, valid, weight;
    for (int64_t k = 0; k < d; ++k) {
      const Tap& tap = taps[k][pick[k]];
      Tensor inside = logical_and(tap.index.ge(0.0), tap.index.lt(static_cast<double>(size[k])));
      Tensor idx = clamp(tap.index, 0.0, static_cast<double>(size[k] - 1));
      lin = lin.defined() ? lin * size[k] + idx : idx;
      valid = valid.defined() ? logical_and(valid, inside) : inside;
      if (tap.weight.defined()) weight = weight.defined() ? weight * tap.weight : tap.weight;
    }
    Tensor read = gather(flat, 2, lin.unsqueeze(1).expand({N, C, L}));  // [N, C, L]
    Tensor w = weight.defined() ? where(valid, weight, zeros_like(weight)) : valid.to(input.dtype());
    Tensor term = read * w.unsqueeze(1);
    out = out.defined() ? out + term : term;
    int64_t k = d - 1;
    while (k >= 0 && ++pick[k] == taps[k].size()) pick[k--] = 0;
    if (k < 0) break;
  }
  return out.reshape(out_shape);
}

}  // namespace lockstep::nn::functional
