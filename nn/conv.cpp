// Conv2d and F::conv2d / F::pad2d. The convolution is im2col through views, one image at a time:
// for each kernel offset, the padded image seen through as_strided as [C, H_out, W_out] is copied
// into columns [C, kH, kW, H_out, W_out], and one GEMM per group gives the image's output. Its
// backward is written beside it (two GEMMs per image, and col2im as kH * kW strided adds): the
// composed ops' backward (as_strided's index_add over every window element) made a CNN's backward
// pass about twice as slow.
#include "nn/conv.h"

#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/ops.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/factory.h"

namespace lockstep::nn {

namespace functional {

Tensor pad2d(const Tensor& x, int64_t left, int64_t right, int64_t top, int64_t bottom, double value) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 2, "pad2d: expected a tensor of at least 2 dimensions, got ",
                 x.defined() ? x.shape() : Shape{});
  LOCKSTEP_CHECK(left >= 0 && right >= 0 && top >= 0 && bottom >= 0, "pad2d: padding must be non-negative, got (",
                 left, ", ", right, ", ", top, ", ", bottom, ")");
  const int64_t h = x.dim() - 2, w = x.dim() - 1;
  auto fill = [&](int64_t d, int64_t n, const Tensor& like) {
    Shape s = like.shape();
    s[d] = n;
    return full(s, value, {like.dtype(), like.device()});
  };
  Tensor out = x;
  if (left || right) {
    std::vector<Tensor> parts;
    if (left) parts.push_back(fill(w, left, out));
    parts.push_back(out);
    if (right) parts.push_back(fill(w, right, out));
    out = cat(parts, w);
  }
  if (top || bottom) {
    std::vector<Tensor> parts;
    if (top) parts.push_back(fill(h, top, out));
    parts.push_back(out);
    if (bottom) parts.push_back(fill(h, bottom, out));
    out = cat(parts, h);
  }
  return out;
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, ExpandingArray<2> stride,
              ExpandingArray<2> padding, ExpandingArray<2> dilation, int64_t groups) {
  LOCKSTEP_CHECK(input.defined() && weight.defined(), "conv2d: got an undefined tensor");
  LOCKSTEP_CHECK(weight.dim() == 4, "conv2d: expected weight [C_out, C_in / groups, kH, kW], got ", weight.shape());
  LOCKSTEP_CHECK(input.dim() == 3 || input.dim() == 4, "conv2d: expected input [N, C, H, W] or [C, H, W], got ",
                 input.shape());
  LOCKSTEP_CHECK(groups > 0 && weight.size(0) % groups == 0, "conv2d: ", weight.size(0),
                 " output channels are not divisible by groups = ", groups);
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : unsqueeze(input, 0);
  const int64_t N = x.size(0), C = x.size(1), O = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  LOCKSTEP_CHECK(C == weight.size(1) * groups, "conv2d: input ", input.shape(), " has ", C,
                 " channels but weight ", weight.shape(), " with groups = ", groups, " expects ",
                 weight.size(1) * groups);
  LOCKSTEP_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == O), "conv2d: expected bias [", O, "], got ",
                 bias.defined() ? bias.shape() : Shape{});
  LOCKSTEP_CHECK(input.dtype() == weight.dtype() && input.device() == weight.device() &&
                     (!bias.defined() || (bias.dtype() == weight.dtype() && bias.device() == weight.device())),
                 "conv2d: input (", input.dtype(), " on ", input.device(), "), weight (", weight.dtype(), " on ",
                 weight.device(), ") and bias must share dtype and device");
  for (int i = 0; i < 2; ++i)
    LOCKSTEP_CHECK(stride[i] > 0 && dilation[i] > 0 && padding[i] >= 0, "conv2d: stride ", stride, " and dilation ",
                   dilation, " must be positive and padding ", padding, " non-negative");
  const int64_t H = x.size(2), W = x.size(3);
  const int64_t Hp = H + 2 * padding[0], Wp = W + 2 * padding[1];
  LOCKSTEP_CHECK(Hp >= dilation[0] * (kh - 1) + 1 && Wp >= dilation[1] * (kw - 1) + 1, "conv2d: input ",
                 input.shape(), " padded to [", Hp, ", ", Wp, "] is smaller than the kernel ", Shape{kh, kw},
                 " with dilation ", dilation);
  const int64_t OH = (Hp - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
  const int64_t OW = (Wp - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
  const int64_t G = groups, Cg = C / G, Og = O / G, K = Cg * kh * kw, L = OH * OW;
  const TensorOptions opts(x.dtype(), x.device());
  // One kernel offset (i, j) of every window of one padded image [C, Hp, Wp]: [C, OH, OW].
  auto windows_at = [=](const Tensor& image, int64_t i, int64_t j) {
    return internal::as_strided(image, {C, OH, OW}, {Hp * Wp, stride[0] * Wp, stride[1]},
                                image.storage_offset() + i * dilation[0] * Wp + j * dilation[1]);
  };
  // im2col of image n of the padded batch into cols6 [C, kh, kw, OH, OW] (= [G, K, L]): kh * kw
  // strided copies.
  auto im2col = [=](const Tensor& padded, int64_t n, Tensor& cols6) {
    Tensor image = internal::select(padded, 0, n);
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        Tensor dst = internal::select(internal::select(cols6, 1, i), 1, j);
        internal::copy_(dst, windows_at(image, i, j));
      }
  };
  // Group g's rows of a [G * rows, cols] matrix.
  auto group = [](const Tensor& m, int64_t g, int64_t rows) { return internal::narrow(m, 0, g * rows, rows); };

  // Forward, unrecorded, one image at a time (as Caffe does): the image's columns [G, K, L] (663 KB
  // for cnn_fashion's conv2) stay in the cache between im2col and the GEMM, and the product
  // W [Og, K] @ cols [K, L] is already image n's output [Og, OH * OW], written in place. Over the
  // whole batch at once the columns were 42 MB, and the output needed a transposing copy.
  Tensor xp = x.detach();
  if (padding[0] || padding[1] || !xp.is_contiguous()) {
    xp = zeros({N, C, Hp, Wp}, opts);
    Tensor inner = internal::narrow(internal::narrow(xp, 2, padding[0], H), 3, padding[1], W);
    internal::copy_(inner, x.detach());
  }
  Tensor w = internal::reshape(weight.detach(), {O, K});
  Tensor cols6 = empty({C, kh, kw, OH, OW}, opts);
  Tensor cols = internal::reshape(cols6, {G * K, L});
  Tensor out = empty({N, O, OH, OW}, opts);
  for (int64_t n = 0; n < N; ++n) {
    im2col(xp, n, cols6);
    Tensor out_n = internal::reshape(internal::select(out, 0, n), {O, L});
    for (int64_t g = 0; g < G; ++g) {
      Tensor dst = group(out_n, g, Og);
      internal::gemm_(dst, group(w, g, Og), false, group(cols, g, K), false, 1.0, 0.0);
    }
  }
  if (bias.defined()) internal::add_(out, internal::reshape(bias.detach(), {1, O, 1, 1}));

  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return batched ? out : internal::squeeze(out, 0);
  const bool grad_x = x.requires_grad(), has_bias = bias.defined();
  const Shape weight_shape = weight.shape();
  // The backward keeps the padded input (5.5 MB for conv2), not the columns, and rebuilds each
  // image's columns as the forward did.
  out = autograd::record("conv2d", out, inputs, [=](const Tensor& g_in) {
    Tensor g = internal::contiguous(g_in);  // [N, O, OH, OW]: image n's gradient is [O, L]
    Tensor gw = N ? empty({O, K}, {g.dtype(), g.device()}) : zeros({O, K}, {g.dtype(), g.device()});
    Tensor gxp = grad_x ? zeros({N, C, Hp, Wp}, {g.dtype(), g.device()}) : Tensor();
    Tensor cols6 = empty({C, kh, kw, OH, OW}, {g.dtype(), g.device()});
    Tensor cols = internal::reshape(cols6, {G * K, L});
    Tensor gcols6 = grad_x ? empty({C, kh, kw, OH, OW}, {g.dtype(), g.device()}) : Tensor();
    Tensor gcols = grad_x ? internal::reshape(gcols6, {G * K, L}) : Tensor();
    for (int64_t n = 0; n < N; ++n) {
      Tensor g_n = internal::reshape(internal::select(g, 0, n), {O, L});
      im2col(xp, n, cols6);
      for (int64_t gi = 0; gi < G; ++gi) {
        // dW += g_n cols^T, summed over the batch image by image.
        Tensor dw = group(gw, gi, Og);
        internal::gemm_(dw, group(g_n, gi, Og), false, group(cols, gi, K), true, 1.0, n == 0 ? 0.0 : 1.0);
        // col2im: dcols = W^T g_n [K, L], added back into the padded image offset by offset.
        if (grad_x) {
          Tensor dc = group(gcols, gi, K);
          internal::gemm_(dc, group(w, gi, Og), true, group(g_n, gi, Og), false, 1.0, 0.0);
        }
      }
      if (grad_x) {
        Tensor image = internal::select(gxp, 0, n);
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            Tensor dst = windows_at(image, i, j);
            internal::add_(dst, internal::select(internal::select(gcols6, 1, i), 1, j));
          }
      }
    }
    std::vector<Tensor> grads{Tensor(), internal::reshape(gw, weight_shape)};
    if (grad_x) {
      grads[0] = internal::contiguous(internal::narrow(internal::narrow(gxp, 2, padding[0], H), 3, padding[1], W));
    }
    if (has_bias) grads.push_back(internal::sum(g, {0, 2, 3}));
    return grads;
  });
  return batched ? out : squeeze(out, 0);
}

}  // namespace functional

Conv2dImpl::Conv2dImpl(const Conv2dOptions& o) : Module("Conv2d"), options(o) {
  LOCKSTEP_CHECK(o.in_channels() > 0 && o.out_channels() > 0 && o.groups() > 0, "Conv2d: in_channels (",
                 o.in_channels(), "), out_channels (", o.out_channels(), ") and groups (", o.groups(),
                 ") must be positive");
  LOCKSTEP_CHECK(o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0, "Conv2d: in_channels (",
                 o.in_channels(), ") and out_channels (", o.out_channels(), ") must be divisible by groups (",
                 o.groups(), ")");
  LOCKSTEP_CHECK(o.kernel_size()[0] > 0 && o.kernel_size()[1] > 0, "Conv2d: kernel_size must be positive, got ",
                 o.kernel_size());
  weight = register_parameter(
      "weight", empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()[0], o.kernel_size()[1]}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}

void Conv2dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) init::uniform_(bias, -init::fan_in_bound(weight), init::fan_in_bound(weight));
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  const Conv2dOptions& o = options;
  LOCKSTEP_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4) && x.size(-3) == o.in_channels(), "Conv2d(",
                 o.in_channels(), ", ", o.out_channels(), ", kernel_size=", o.kernel_size(), "): expected input [N, ",
                 o.in_channels(), ", H, W] or [", o.in_channels(), ", H, W], got ", x.defined() ? x.shape() : Shape{});
  LOCKSTEP_CHECK(x.dtype() == weight.dtype() && x.device() == weight.device(), "Conv2d: input is ", x.dtype(), " on ",
                 x.device(), " but the layer is ", weight.dtype(), " on ", weight.device(), " (use .to())");
  return functional::conv2d(x, weight, bias, o.stride(), o.padding(), o.dilation(), o.groups());
}

}  // namespace lockstep::nn
