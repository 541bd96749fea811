// Conv2d and F::conv2d / F::pad2d. The convolution is im2col through views, a chunk of images at a
// time: for each kernel offset, the padded images seen through as_strided as [n, C, H_out, W_out]
// are copied into columns [C, kH, kW, n, H_out, W_out], and one GEMM per group gives the chunk's
// output. Its backward is written beside it (two GEMMs per chunk, and col2im as kH * kW strided
// adds): the composed ops' backward (as_strided's index_add over every window element) made a CNN's
// backward pass about twice as slow.
#include "nn/conv.h"

#include <algorithm>
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/conv2d.h"
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

Tensor conv2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, ExpandingArray<2> stride,
              ExpandingArray<2> padding, ExpandingArray<2> dilation, int64_t groups) {
  LOCKSTEP_CHECK(input_in.defined() && weight_in.defined(), "conv2d: got an undefined tensor");
  const auto xwb = autograd::amp::cast_inputs(autograd::amp::AutocastOp::Conv2d, input_in, weight_in, bias_in);
  const Tensor &input = xwb[0], &weight = xwb[1], &bias = xwb[2];
  LOCKSTEP_CHECK(weight.dim() == 4, "conv2d: expected weight [C_out, C_in / groups, kH, kW], got ", weight.shape());
  LOCKSTEP_CHECK(input.dim() == 3 || input.dim() == 4, "conv2d: expected input [N, C, H, W] or [C, H, W], got ",
                 input.shape());
  LOCKSTEP_CHECK(groups > 0 && weight.size(0) % groups == 0, "conv2d: ", weight.size(0),
                 " output channels are not divisible by groups = ", groups);
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : unsqueeze(input, 0);
  const int64_t C = x.size(1), O = weight.size(0), kh = weight.size(2), kw = weight.size(3);
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
  const int64_t Hp = x.size(2) + 2 * padding[0], Wp = x.size(3) + 2 * padding[1];
  LOCKSTEP_CHECK(Hp >= dilation[0] * (kh - 1) + 1 && Wp >= dilation[1] * (kw - 1) + 1, "conv2d: input ",
                 input.shape(), " padded to [", Hp, ", ", Wp, "] is smaller than the kernel ", Shape{kh, kw},
                 " with dilation ", dilation);
  const internal::Conv2dParams p{.stride = {stride[0], stride[1]},
                                 .padding = {padding[0], padding[1]},
                                 .dilation = {dilation[0], dilation[1]},
                                 .groups = groups};
  Tensor out = internal::conv2d_forward(x.detach(), weight.detach(), bias.defined() ? bias.detach() : Tensor(), p);

  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return batched ? out : internal::squeeze(out, 0);
  const bool grad_x = x.requires_grad(), grad_w = weight.requires_grad();
  const bool grad_b = bias.defined() && bias.requires_grad(), has_bias = bias.defined();
  // Backward keeps the input and the weight (detached: no cycle through the graph).
  out = autograd::record("conv2d", out, inputs, [=, xd = x.detach(), wd = weight.detach()](const Tensor& g) {
    auto [gx, gw, gb] = internal::conv2d_backward(g, xd, wd, grad_x, grad_w, grad_b, p);
    std::vector<Tensor> grads{gx, gw};
    if (has_bias) grads.push_back(gb);
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
  // The dtypes as conv2d computes them: after autocast's cast (a bf16 activation meets float32 weights).
  const auto [xc, wc] = autograd::amp::cast_inputs(autograd::amp::AutocastOp::Conv2d, x, weight);
  LOCKSTEP_CHECK(xc.dtype() == wc.dtype() && x.device() == weight.device(), "Conv2d: input is ", x.dtype(), " on ",
                 x.device(), " but the layer is ", weight.dtype(), " on ", weight.device(), " (use .to())");
  return functional::conv2d(xc, wc, bias, o.stride(), o.padding(), o.dilation(), o.groups());
}

}  // namespace lockstep::nn
