// Pooling. Max pooling is one kernel (internal::max_pool2d) that also says where each maximum is;
// its gradient goes there through one index_add, as PyTorch's index-based backward. Average pooling
// adds up the kH * kW offsets of the windows, each a strided view [N, C, H_out, W_out] of the padded
// input; its backward is strided adds into the padded gradient (float32 and 16-bit tensors on the CPU:
// one fused kernel each way, internal::avg_pool2d_fused). Backward is written beside each.
// Adaptive average pooling is separable: P_h x P_w^T with constant averaging matrices.
#include <cmath>
#include <limits>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/ops.h"
#include "nn/pooling.h"
#include "tensor/factory.h"

namespace lockstep::nn::functional {

namespace {

struct Geometry {
  int64_t k[2], s[2], p[2], d[2], out[2], extra[2];  // extra: right/bottom padding ceil_mode needs
};

// PyTorch's pooling output size, including ceil_mode's rule that the last window starts inside the
// input or its left padding.
Geometry geometry(const char* fn, const Tensor& x, ExpandingArray<2> k, ExpandingArray<2> s, ExpandingArray<2> p,
                  ExpandingArray<2> d, bool ceil_mode) {
  LOCKSTEP_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), fn, ": expected input [N, C, H, W] or [C, H, W], got ",
                 x.defined() ? x.shape() : Shape{});
  Geometry g{};
  for (int i = 0; i < 2; ++i) {
    g.k[i] = k[i], g.s[i] = s[i] == 0 ? k[i] : s[i], g.p[i] = p[i], g.d[i] = d[i];
    LOCKSTEP_CHECK(g.k[i] > 0 && g.s[i] > 0 && g.d[i] > 0, fn, ": kernel_size ", k, ", stride ", s, " and dilation ",
                   d, " must be positive");
    LOCKSTEP_CHECK(g.p[i] >= 0 && 2 * g.p[i] <= g.d[i] * (g.k[i] - 1) + 1, fn, ": padding ", p,
                   " must be non-negative and at most half the kernel size ", k);
    const int64_t n = x.size(x.dim() - 2 + i), span = n + 2 * g.p[i] - g.d[i] * (g.k[i] - 1) - 1;
    LOCKSTEP_CHECK(span >= 0, fn, ": input ", x.shape(), " is smaller than the kernel ", k, " (padding ", p, ")");
    g.out[i] = (ceil_mode ? (span + g.s[i] - 1) / g.s[i] : span / g.s[i]) + 1;
    if (ceil_mode && (g.out[i] - 1) * g.s[i] >= n + g.p[i]) --g.out[i];
    g.extra[i] = std::max<int64_t>(0, (g.out[i] - 1) * g.s[i] + g.d[i] * (g.k[i] - 1) + 1 - (n + 2 * g.p[i]));
  }
  return g;
}

// Offset (i, j) of every window of the padded [N, C, Hp, Wp]: a strided view [N, C, OH, OW].
Tensor offset(const Tensor& padded, const Geometry& g, int64_t i, int64_t j) {
  const int64_t N = padded.size(0), C = padded.size(1), Hp = padded.size(2), Wp = padded.size(3);
  return internal::as_strided(padded, {N, C, g.out[0], g.out[1]}, {C * Hp * Wp, Hp * Wp, g.s[0] * Wp, g.s[1]},
                              padded.storage_offset() + i * g.d[0] * Wp + j * g.d[1]);
}

// The sum over each window (unrecorded): kH * kW adds of strided views.
Tensor window_sum(const Tensor& padded, const Geometry& g) {
  Tensor total = internal::clone(offset(padded, g, 0, 0));
  for (int64_t i = 0; i < g.k[0]; ++i)
    for (int64_t j = 0; j < g.k[1]; ++j)
      if (i || j) internal::add_(total, offset(padded, g, i, j));
  return total;
}

// The input's part of a padded gradient [N, C, Hp, Wp].
Tensor unpad(const Tensor& padded, const Geometry& g, int64_t H, int64_t W) {
  return internal::contiguous(internal::narrow(internal::narrow(padded, 2, g.p[0], H), 3, g.p[1], W));
}

Tensor pad(const Tensor& x, const Geometry& g, double value) {
  return pad2d(x, g.p[1], g.p[1] + g.extra[1], g.p[0], g.p[0] + g.extra[0], value);
}

}  // namespace

// Max pooling: the maximum of each window of the (-inf padded) input, by one kernel that also says
// where it is. Backward sends each output's gradient there, as PyTorch's index-based backward does.
Tensor max_pool2d(const Tensor& input, ExpandingArray<2> k, ExpandingArray<2> s, ExpandingArray<2> p,
                  ExpandingArray<2> d, bool ceil_mode) {
  namespace in = internal;
  Geometry g = geometry("max_pool2d", input, k, s, p, d, ceil_mode);
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : unsqueeze(input, 0);
  const int64_t H = x.size(2), W = x.size(3);
  // Padded with -inf where there is padding (unrecorded).
  const bool padded = g.p[0] || g.p[1] || g.extra[0] || g.extra[1];
  Tensor xp = in::contiguous(padded ? pad(x.detach(), g, -std::numeric_limits<double>::infinity()) : x.detach());
  MaxPool2dArgs a;
  a.planes = xp.size(0) * xp.size(1), a.H = xp.size(2), a.W = xp.size(3), a.OH = g.out[0], a.OW = g.out[1];
  a.kh = g.k[0], a.kw = g.k[1], a.sh = g.s[0], a.sw = g.s[1], a.dh = g.d[0], a.dw = g.d[1];
  auto [out, indices] = in::max_pool2d(xp, a);
  if (autograd::needs_grad({x})) {
    out = autograd::record("max_pool2d", out, {x}, [g, H, W, indices = indices, shape = xp.shape(), cells = xp.numel()](const Tensor& grad) {
      // Each output's gradient goes to the cell that held its maximum (the first NaN, else the first
      // maximum of its window, as PyTorch's indices): one index_add into the padded input's shape.
      Tensor gxp = zeros({cells}, {grad.dtype(), grad.device()});
      in::index_add_(gxp, 0, in::reshape(indices, {-1}), in::reshape(in::contiguous(grad), {-1}));
      return std::vector<Tensor>{unpad(in::view(gxp, shape), g, H, W)};
    });
  }
  return batched ? out : squeeze(out, 0);
}

Tensor avg_pool2d(const Tensor& input, ExpandingArray<2> k, ExpandingArray<2> s, ExpandingArray<2> p, bool ceil_mode,
                  bool count_include_pad) {
  namespace in = internal;
  Geometry g = geometry("avg_pool2d", input, k, s, p, 1, ceil_mode);
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : unsqueeze(input, 0);
  const int64_t H = x.size(2), W = x.size(3);
  if (in::avg_pool2d_fused_applies(x)) {
    // The backend's fused kernel each way (float32 and 16 bits on the CPU), reading and writing x's
    // dtype with float32 sums, instead of the padded copy and strided adds below.
    AvgPool2dArgs a;
    a.planes = x.size(0) * x.size(1), a.H = H, a.W = W, a.OH = g.out[0], a.OW = g.out[1];
    a.kh = g.k[0], a.kw = g.k[1], a.sh = g.s[0], a.sw = g.s[1], a.ph = g.p[0], a.pw = g.p[1];
    a.count_include_pad = count_include_pad;
    Tensor out = in::avg_pool2d_fused(x.detach(), a);
    if (autograd::needs_grad({x}))
      out = autograd::record("avg_pool2d", out, {x}, [a, dt = x.dtype()](const Tensor& grad) {
        return std::vector<Tensor>{in::avg_pool2d_fused_backward(in::to_dtype(grad, dt), a)};
      });
    return batched ? out : squeeze(out, 0);
  }
  // float64, and other devices: a bfloat16 or float16 input (on a GPU) is padded into float32 (the padded
  // copy the window views need, made in float32 instead of 16 bits): each window is summed and divided
  // in float32 and the average rounded once, as PyTorch's CPU kernel accumulates in float. (Summing
  // 16-bit views into a float32 total instead took twice as long: strided mixed-dtype adds.)
  const Dtype acc = is_reduced_floating_point(x.dtype()) ? kFloat32 : x.dtype();
  // Nothing here requires a gradient: unrecorded.
  Tensor xp = in::contiguous(pad(in::to_dtype(x.detach(), acc), g, 0));
  // The divisor of each window: how many of its cells are input (or, with count_include_pad, input or
  // left/right padding, but not ceil_mode's extra cells), as PyTorch. [1, 1, OH, OW]
  Tensor cells = ones({1, 1, H, W}, {acc, x.device()});
  if (count_include_pad) cells = pad2d(cells, g.p[1], g.p[1], g.p[0], g.p[0], 1);
  Geometry gd = g;
  if (count_include_pad) gd.p[0] = gd.p[1] = 0;
  Tensor divisor = window_sum(pad(cells, gd, 0), g);
  Tensor out = in::to_dtype(in::div(window_sum(xp, g), divisor), x.dtype());  // rounded once
  if (autograd::needs_grad({x})) {
    out = autograd::record("avg_pool2d", out, {x}, [=, shape = xp.shape()](const Tensor& grad) {
      // Each window's gradient, spread evenly over its cells, in the gradient's dtype (a 16-bit share is
      // rounded once, and each add into the 16-bit input gradient rounds, as PyTorch's).
      Tensor share = in::to_dtype(in::div(grad, divisor), grad.dtype());
      Tensor gxp = zeros(shape, {grad.dtype(), grad.device()});
      for (int64_t i = 0; i < g.k[0]; ++i)
        for (int64_t j = 0; j < g.k[1]; ++j) {
          Tensor dst = offset(gxp, g, i, j);
          in::add_(dst, share);
        }
      return std::vector<Tensor>{unpad(gxp, g, H, W)};
    });
  }
  return batched ? out : squeeze(out, 0);
}

Tensor adaptive_avg_pool2d(const Tensor& input, ExpandingArray<2> output_size) {
  LOCKSTEP_CHECK(input.defined() && (input.dim() == 3 || input.dim() == 4),
                 "adaptive_avg_pool2d: expected input [N, C, H, W] or [C, H, W], got ",
                 input.defined() ? input.shape() : Shape{});
  const int64_t H = input.size(-2), W = input.size(-1);
  LOCKSTEP_CHECK(output_size[0] > 0 && output_size[1] > 0 && H > 0 && W > 0, "adaptive_avg_pool2d: output_size ",
                 output_size, " and the input's spatial size ", Shape{H, W}, " must be positive");
  // P [out, n]: row i averages cells [floor(i n / out), ceil((i + 1) n / out)).
  auto averaging = [&](int64_t out, int64_t n) {
    std::vector<double> m(out * n, 0.0);
    for (int64_t i = 0; i < out; ++i) {
      int64_t a = i * n / out, b = ((i + 1) * n + out - 1) / out;
      for (int64_t j = a; j < b; ++j) m[i * n + j] = 1.0 / static_cast<double>(b - a);
    }
    return to(to(tensor(m, {out, n}), input.dtype()), input.device());
  };
  Tensor ph = averaging(output_size[0], H), pw = averaging(output_size[1], W);
  return matmul(matmul(ph, input), transpose(pw, 0, 1));  // [.., out_h, H] [.., H, W] [W, out_w]
}

}  // namespace lockstep::nn::functional
