// Conv1d/2d/3d and F::conv1d/2d/3d. The 2-D convolution is one autograd node over the
// tensor layer's kernels (tensor/conv2d.h: the backend's direct kernel, or im2col and a GEMM per chunk
// of images, with their own backward: the composed ops' backward, as_strided's index_add over every
// window element, made a CNN's backward pass about twice as slow). Conv1d is that node on a height-1
// image; Conv3d a sum of such nodes, one per kernel depth offset, over depth slices folded into the batch.
#include "nn/conv.h"

#include <ostream>

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


namespace {

// [N, C, L] as [N, C, 1, L] (or unbatched [C, L] as [C, 1, L]): a 1-D convolution is a 2-D one of height 1.
Tensor as_height_one(const Tensor& t, const char* op, const char* what) {
  LOCKSTEP_CHECK(t.defined() && (t.dim() == 2 || t.dim() == 3), op, ": expected ", what, " of 2 or 3 dimensions, got ",
                 t.defined() ? t.shape() : Shape{});
  return unsqueeze(t, t.dim() - 1);
}

}  // namespace

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, ExpandingArray<1> stride,
              ExpandingArray<1> padding, ExpandingArray<1> dilation, int64_t groups) {
  LOCKSTEP_CHECK(weight.defined() && weight.dim() == 3, "conv1d: expected weight [C_out, C_in / groups, k], got ",
                 weight.defined() ? weight.shape() : Shape{});
  Tensor y = conv2d(as_height_one(input, "conv1d", "input"), unsqueeze(weight, 2), bias, {1, stride[0]},
                    {0, padding[0]}, {1, dilation[0]}, groups);
  return squeeze(y, y.dim() - 2);
}

Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, ExpandingArray<3> stride,
              ExpandingArray<3> padding, ExpandingArray<3> dilation, int64_t groups) {
  LOCKSTEP_CHECK(weight.defined() && weight.dim() == 5, "conv3d: expected weight [C_out, C_in / groups, kD, kH, kW], "
                 "got ", weight.defined() ? weight.shape() : Shape{});
  LOCKSTEP_CHECK(input.defined() && (input.dim() == 4 || input.dim() == 5),
                 "conv3d: expected input [N, C, D, H, W] or [C, D, H, W], got ", input.defined() ? input.shape() : Shape{});
  for (int i = 0; i < 3; ++i)
    LOCKSTEP_CHECK(stride[i] > 0 && dilation[i] > 0 && padding[i] >= 0, "conv3d: stride ", stride, " and dilation ",
                   dilation, " must be positive and padding ", padding, " non-negative");
  const bool batched = input.dim() == 5;
  Tensor x = batched ? input : unsqueeze(input, 0);
  LOCKSTEP_CHECK(x.size(1) == weight.size(1) * groups, "conv3d: input ", input.shape(), " has ", x.size(1),
                 " channels but weight ", weight.shape(), " with groups = ", groups, " expects ", weight.size(1) * groups);
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), kd = weight.size(2);
  const int64_t Dp = D + 2 * padding[0], span = dilation[0] * (kd - 1) + 1;
  LOCKSTEP_CHECK(Dp >= span, "conv3d: input ", input.shape(), " padded to depth ", Dp, " is shallower than the kernel ",
                 weight.shape(), " with dilation ", dilation);
  const int64_t Do = (Dp - span) / stride[0] + 1;
  if (padding[0]) {
    Shape z = x.shape();
    z[2] = padding[0];
    Tensor zeros_d = zeros(z, {x.dtype(), x.device()});
    x = cat({zeros_d, x, zeros_d}, 2);
  }
  // Kernel depth offset j sees depths j d, j d + s, ...: those Do slices as images of one batch of
  // N * Do, convolved in 2-D by the kernel's slice j; the offsets' results summed.
  Tensor sum;
  for (int64_t j = 0; j < kd; ++j) {
    Tensor slab = slice(x, 2, j * dilation[0], j * dilation[0] + (Do - 1) * stride[0] + 1, stride[0]);  // [N, C, Do, H, W]
    Tensor images = reshape(permute(slab, {0, 2, 1, 3, 4}), {N * Do, C, x.size(3), x.size(4)});
    Tensor y = conv2d(images, select(weight, 2, j), Tensor(), {stride[1], stride[2]}, {padding[1], padding[2]},
                      {dilation[1], dilation[2]}, groups);
    sum = j == 0 ? y : add(sum, y);
  }
  Tensor y = permute(reshape(sum, {N, Do, sum.size(1), sum.size(2), sum.size(3)}), {0, 2, 1, 3, 4});
  if (bias.defined()) y = add(y, reshape(bias, {1, bias.numel(), 1, 1, 1}));
  return batched ? y : squeeze(y, 0);
}

}  // namespace functional

// --- the modules ---

namespace {

template <size_t D>
Shape kernel_shape(int64_t a, int64_t b, const ExpandingArray<D>& k) {
  Shape s{a, b};
  for (size_t i = 0; i < D; ++i) s.push_back(k[i]);
  return s;
}

}  // namespace

template <size_t D, bool T>
ConvNdImpl<D, T>::ConvNdImpl(const Options& o, const char* name) : Module(name), options(o) {
  LOCKSTEP_CHECK(o.in_channels() > 0 && o.out_channels() > 0 && o.groups() > 0, name, ": in_channels (",
                 o.in_channels(), "), out_channels (", o.out_channels(), ") and groups (", o.groups(),
                 ") must be positive");
  LOCKSTEP_CHECK(o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0, name, ": in_channels (",
                 o.in_channels(), ") and out_channels (", o.out_channels(), ") must be divisible by groups (",
                 o.groups(), ")");
  for (size_t i = 0; i < D; ++i)
    LOCKSTEP_CHECK(o.kernel_size()[i] > 0, name, ": kernel_size must be positive, got ", o.kernel_size());
  if constexpr (T) {
    for (size_t i = 0; i < D; ++i)
      LOCKSTEP_CHECK(o.output_padding()[i] < o.stride()[i] || o.output_padding()[i] < o.dilation()[i], name,
                     ": output_padding ", o.output_padding(), " must be smaller than either stride ", o.stride(),
                     " or dilation ", o.dilation());
  }
  const int64_t a = T ? o.in_channels() : o.out_channels(), b = (T ? o.out_channels() : o.in_channels()) / o.groups();
  weight = register_parameter("weight", empty(kernel_shape<D>(a, b, o.kernel_size())));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}

template <size_t D, bool T>
void ConvNdImpl<D, T>::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) init::uniform_(bias, -init::fan_in_bound(weight), init::fan_in_bound(weight));
}

template <size_t D, bool T>
Tensor ConvNdImpl<D, T>::forward(const Tensor& x) {
  const Options& o = options;
  const int64_t dims = static_cast<int64_t>(D);
  const char* spatial = D == 1 ? "L" : D == 2 ? "H, W" : "D, H, W";
  LOCKSTEP_CHECK(x.defined() && (x.dim() == dims + 1 || x.dim() == dims + 2) && x.size(-dims - 1) == o.in_channels(),
                 name(), "(", o.in_channels(), ", ", o.out_channels(), ", kernel_size=", o.kernel_size(),
                 "): expected input [N, ", o.in_channels(), ", ", spatial, "] or [", o.in_channels(), ", ", spatial,
                 "], got ", x.defined() ? x.shape() : Shape{});
  // The dtypes as the convolution computes them: after autocast's cast (a bf16 activation meets float32 weights).
  const auto [xc, wc] = autograd::amp::cast_inputs(autograd::amp::AutocastOp::Conv2d, x, weight);
  LOCKSTEP_CHECK(xc.dtype() == wc.dtype() && x.device() == weight.device(), name(), ": input is ", x.dtype(), " on ",
                 x.device(), " but the layer is ", weight.dtype(), " on ", weight.device(), " (use .to())");
  if constexpr (!T) {
    if constexpr (D == 1) return functional::conv1d(xc, wc, bias, o.stride(), o.padding(), o.dilation(), o.groups());
    if constexpr (D == 2) return functional::conv2d(xc, wc, bias, o.stride(), o.padding(), o.dilation(), o.groups());
    if constexpr (D == 3) return functional::conv3d(xc, wc, bias, o.stride(), o.padding(), o.dilation(), o.groups());
  } else {
    if constexpr (D == 1)
      return functional::conv_transpose1d(xc, wc, bias, o.stride(), o.padding(), o.output_padding(), o.groups(),
                                          o.dilation());
    if constexpr (D == 2)
      return functional::conv_transpose2d(xc, wc, bias, o.stride(), o.padding(), o.output_padding(), o.groups(),
                                          o.dilation());
    if constexpr (D == 3)
      return functional::conv_transpose3d(xc, wc, bias, o.stride(), o.padding(), o.output_padding(), o.groups(),
                                          o.dilation());
  }
}

template <size_t D, bool Transposed>
void ConvNdImpl<D, Transposed>::pretty_print(std::ostream& os) const {
  const Options& o = options;
  auto all = [](const ExpandingArray<D>& a, int64_t v) {
    for (size_t i = 0; i < D; ++i)
      if (a[i] != v) return false;
    return true;
  };
  os << name() << "(" << o.in_channels() << ", " << o.out_channels() << ", kernel_size=" << o.kernel_size()
     << ", stride=" << o.stride();
  if (!all(o.padding(), 0)) os << ", padding=" << o.padding();
  if (!all(o.dilation(), 1)) os << ", dilation=" << o.dilation();
  if constexpr (Transposed) {
    if (!all(o.output_padding(), 0)) os << ", output_padding=" << o.output_padding();
  }
  if (o.groups() != 1) os << ", groups=" << o.groups();
  if (!o.bias()) os << ", bias=false";
  os << ")";
}

template class ConvNdImpl<1, false>;
template class ConvNdImpl<2, false>;
template class ConvNdImpl<3, false>;
template class ConvNdImpl<1, true>;
template class ConvNdImpl<2, true>;
template class ConvNdImpl<3, true>;

}  // namespace lockstep::nn
