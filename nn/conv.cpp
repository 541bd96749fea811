// Conv2d and F::conv2d / F::pad2d. The convolution is im2col through views, a chunk of images at a
// time: for each kernel offset, the padded images seen through as_strided as [n, C, H_out, W_out]
// are copied into columns [C, kH, kW, n, H_out, W_out], and one GEMM per group gives the chunk's
// output. Its backward is written beside it (two GEMMs per chunk, and col2im as kH * kW strided
// adds): the composed ops' backward (as_strided's index_add over every window element) made a CNN's
// backward pass about twice as slow.
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
  // One kernel offset (i, j) of every window of a chunk of the padded batch [n, C, Hp, Wp]:
  // [n, C, OH, OW].
  auto windows_at = [=](const Tensor& padded, int64_t i, int64_t j) {
    return internal::as_strided(padded, {padded.size(0), C, OH, OW}, {C * Hp * Wp, Hp * Wp, stride[0] * Wp, stride[1]},
                                padded.storage_offset() + i * dilation[0] * Wp + j * dilation[1]);
  };
  // The batch goes through in chunks of images. On the CPU a chunk's columns ([G * K, n * L]) are
  // kept near 1 MiB, so they stay in the cache between im2col and the GEMM: one image at a time for
  // cnn_fashion's conv2 (663 KB), 43 for conv1. Over the whole batch at once the columns were 42 MB,
  // written and read back through memory. A one-image chunk's product is that image's output in
  // place; larger chunks are transposed into place. On CUDA the whole batch is one chunk: there,
  // kernel launches cost more than memory traffic.
  const int64_t per_image = C * kh * kw * L;
  const int64_t chunk = x.device().is_cuda() ? std::max<int64_t>(N, 1)
                                             : std::clamp<int64_t>((int64_t(1) << 18) / std::max<int64_t>(per_image, 1),
                                                                   1, std::max<int64_t>(N, 1));
  // `buf` when it already has this shape, else a new tensor kept in `buf`: the chunk loops below
  // allocate their work tensors once (and once more for a shorter last chunk), not per chunk.
  auto reuse = [](Tensor& buf, const Shape& shape, const TensorOptions& o) -> Tensor& {
    if (!buf.defined() || buf.shape() != shape) buf = empty(shape, o);
    return buf;
  };
  // im2col of images [n0, n0 + n) of the padded batch: kh * kw strided copies into columns
  // [C, kh, kw, n, OH, OW] (held in `buf`), returned as [G * K, n * L].
  auto im2col = [=](const Tensor& padded, int64_t n0, int64_t n, Tensor& buf) {
    Tensor& cols6 = reuse(buf, {C, kh, kw, n, OH, OW}, TensorOptions(padded.dtype(), padded.device()));
    Tensor images = internal::narrow(padded, 0, n0, n);
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        Tensor dst = internal::select(internal::select(cols6, 1, i), 1, j);  // [C, n, OH, OW]
        internal::copy_(dst, internal::permute(windows_at(images, i, j), {1, 0, 2, 3}));
      }
    return internal::reshape(cols6, {G * K, n * L});
  };
  // Group g's rows of a [G * rows, cols] matrix.
  auto group = [](const Tensor& m, int64_t g, int64_t rows) { return internal::narrow(m, 0, g * rows, rows); };

  Tensor xp = x.detach();
  if (padding[0] || padding[1] || !xp.is_contiguous()) {
    xp = zeros({N, C, Hp, Wp}, opts);
    Tensor inner = internal::narrow(internal::narrow(xp, 2, padding[0], H), 3, padding[1], W);
    internal::copy_(inner, x.detach());
  }
  Tensor w = internal::reshape(weight.detach(), {O, K});
  Tensor out = empty({N, O, OH, OW}, opts);
  Tensor cols_buf, prod_buf;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t n = std::min(chunk, N - n0);
    Tensor cols = im2col(xp, n0, n, cols_buf);
    Tensor prod = n == 1 ? internal::reshape(internal::select(out, 0, n0), {O, L}) : reuse(prod_buf, {O, n * L}, opts);
    for (int64_t g = 0; g < G; ++g) {
      Tensor dst = group(prod, g, Og);
      internal::gemm_(dst, group(w, g, Og), false, group(cols, g, K), false, 1.0, 0.0);
    }
    if (n > 1) {  // [O, n, L] -> images [n, O, L]
      Tensor dst = internal::reshape(internal::narrow(out, 0, n0, n), {n, O, L});
      internal::copy_(dst, internal::permute(internal::reshape(prod, {O, n, L}), {1, 0, 2}));
    }
  }
  if (bias.defined()) internal::add_(out, internal::reshape(bias.detach(), {1, O, 1, 1}));

  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return batched ? out : internal::squeeze(out, 0);
  const bool grad_x = x.requires_grad(), has_bias = bias.defined();
  const Shape weight_shape = weight.shape();
  // The backward keeps the padded input (5.5 MB for cnn_fashion's conv2), not the columns, and
  // rebuilds each chunk's columns as the forward did.
  out = autograd::record("conv2d", out, inputs, [=](const Tensor& g_in) {
    const TensorOptions go(g_in.dtype(), g_in.device());
    Tensor g = internal::contiguous(g_in);  // [N, O, OH, OW]
    Tensor gw = N ? empty({O, K}, go) : zeros({O, K}, go);
    Tensor gxp = grad_x ? zeros({N, C, Hp, Wp}, go) : Tensor();
    Tensor cols_buf, gcols_buf, gc_buf;
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
      const int64_t n = std::min(chunk, N - n0);
      // The chunk's gradient as [O, n * L].
      Tensor gc;
      if (n == 1) {
        gc = internal::reshape(internal::select(g, 0, n0), {O, L});
      } else {  // images [n, O, L] -> [O, n, L]
        gc = reuse(gc_buf, {O, n * L}, go);
        Tensor dst = internal::reshape(gc, {O, n, L});
        internal::copy_(dst, internal::permute(internal::reshape(internal::narrow(g, 0, n0, n), {n, O, L}), {1, 0, 2}));
      }
      Tensor cols = im2col(xp, n0, n, cols_buf);
      Tensor gcols = grad_x ? reuse(gcols_buf, {G * K, n * L}, go) : Tensor();
      for (int64_t gi = 0; gi < G; ++gi) {
        // dW += g cols^T, summed over the batch chunk by chunk.
        Tensor dw = group(gw, gi, Og);
        internal::gemm_(dw, group(gc, gi, Og), false, group(cols, gi, K), true, 1.0, n0 == 0 ? 0.0 : 1.0);
        // col2im: dcols = W^T g [K, n * L], added back into the padded images offset by offset.
        if (grad_x) {
          Tensor dc = group(gcols, gi, K);
          internal::gemm_(dc, group(w, gi, Og), true, group(gc, gi, Og), false, 1.0, 0.0);
        }
      }
      if (grad_x) {
        Tensor gcols6 = internal::reshape(gcols, {C, kh, kw, n, OH, OW});
        Tensor images = internal::narrow(gxp, 0, n0, n);
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            Tensor dst = windows_at(images, i, j);
            internal::add_(dst, internal::permute(internal::select(internal::select(gcols6, 1, i), 1, j), {1, 0, 2, 3}));
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
