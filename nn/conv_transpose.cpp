// The transposed convolutions, F::conv_transpose1d/2d/3d. conv_transpose2d is one autograd node over
// the 2-D convolution's kernels read backwards: its forward is the convolution's backward-data (weight
// [C_in, C_out / groups, kH, kW] is exactly the weight of the convolution from C_out to C_in channels),
// its input gradient the convolution's forward, its weight gradient the convolution's backward-weight
// with the roles of input and output gradient exchanged. So the CPU runs oneDNN's backward-data kernel
// for it (no im2col buffer), and every device what it runs for Conv2d. 1-D is 2-D of height 1; 3-D a sum
// over the kernel's depth of 2-D transposed convolutions, each placed at its depths.
#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/node.h"
#include "nn/conv.h"
#include "tensor/conv2d.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn::functional {

namespace {

template <size_t D>
void check_transposed(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, const ExpandingArray<D>& stride,
                      const ExpandingArray<D>& padding, const ExpandingArray<D>& output_padding, int64_t groups,
                      const ExpandingArray<D>& dilation) {
  const int64_t dims = static_cast<int64_t>(D);
  LOCKSTEP_CHECK(x.defined() && w.defined(), op, ": got an undefined tensor");
  LOCKSTEP_CHECK(w.dim() == dims + 2, op, ": expected weight [C_in, C_out / groups, k...] of ", dims + 2,
                 " dimensions, got ", w.shape());
  LOCKSTEP_CHECK(x.dim() == dims + 1 || x.dim() == dims + 2, op, ": expected input of ", dims + 1, " or ", dims + 2,
                 " dimensions, got ", x.shape());
  const int64_t c = x.size(-dims - 1);
  LOCKSTEP_CHECK(groups > 0 && w.size(0) % groups == 0, op, ": weight ", w.shape(), "'s ", w.size(0),
                 " input channels are not divisible by groups = ", groups);
  LOCKSTEP_CHECK(c == w.size(0), op, ": input ", x.shape(), " has ", c, " channels but weight ", w.shape(),
                 " expects ", w.size(0));
  LOCKSTEP_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(1) * groups), op, ": expected bias [",
                 w.size(1) * groups, "], got ", b.defined() ? b.shape() : Shape{});
  LOCKSTEP_CHECK(x.dtype() == w.dtype() && x.device() == w.device() &&
                     (!b.defined() || (b.dtype() == w.dtype() && b.device() == w.device())),
                 op, ": input (", x.dtype(), " on ", x.device(), "), weight (", w.dtype(), " on ", w.device(),
                 ") and bias must share dtype and device");
  for (size_t i = 0; i < D; ++i) {
    LOCKSTEP_CHECK(stride[i] > 0 && dilation[i] > 0 && padding[i] >= 0 && output_padding[i] >= 0, op, ": stride ",
                   stride, " and dilation ", dilation, " must be positive, padding ", padding, " and output_padding ",
                   output_padding, " non-negative");
    LOCKSTEP_CHECK(output_padding[i] < stride[i] || output_padding[i] < dilation[i], op, ": output_padding ",
                   output_padding, " must be smaller than either stride ", stride, " or dilation ", dilation);
    const int64_t in = x.size(x.dim() - dims + static_cast<int64_t>(i)), k = w.size(2 + static_cast<int64_t>(i));
    LOCKSTEP_CHECK((in - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + output_padding[i] + 1 > 0, op,
                   ": input ", x.shape(), " with stride ", stride, " and padding ", padding, " gives no output");
  }
}

}  // namespace

Tensor conv_transpose2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
                        ExpandingArray<2> stride, ExpandingArray<2> padding, ExpandingArray<2> output_padding,
                        int64_t groups, ExpandingArray<2> dilation) {
  LOCKSTEP_CHECK(input_in.defined() && weight_in.defined(), "conv_transpose2d: got an undefined tensor");
  const auto xwb = autograd::amp::cast_inputs(autograd::amp::AutocastOp::Conv2d, input_in, weight_in, bias_in);
  const Tensor &input = xwb[0], &weight = xwb[1], &bias = xwb[2];
  check_transposed<2>("conv_transpose2d", input, weight, bias, stride, padding, output_padding, groups, dilation);
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : unsqueeze(input, 0);
  const int64_t N = x.size(0), H = x.size(2), W = x.size(3), O = weight.size(1) * groups;
  if (H == 1 && W == 1 && groups == 1 && padding[0] == 0 && padding[1] == 0 && output_padding[0] == 0 &&
      output_padding[1] == 0 && dilation[0] == 1 && dilation[1] == 1) {
    // A 1 x 1 input (a generator's noise vector) places one kernel per sample: x [N, C_in] times the
    // weight seen as [C_in, C_out kH kW], one GEMM each way instead of backward-data over mostly padding.
    Tensor y = reshape(matmul(reshape(x, {N, x.size(1)}), reshape(weight, {weight.size(0), -1})),
                       {N, O, weight.size(2), weight.size(3)});
    if (bias.defined()) y = add(y, reshape(bias, {1, O, 1, 1}));
    return batched ? y : squeeze(y, 0);
  }
  const int64_t Ho = (H - 1) * stride[0] - 2 * padding[0] + dilation[0] * (weight.size(2) - 1) + output_padding[0] + 1;
  const int64_t Wo = (W - 1) * stride[1] - 2 * padding[1] + dilation[1] * (weight.size(3) - 1) + output_padding[1] + 1;
  const internal::Conv2dParams p{.stride = {stride[0], stride[1]},
                                 .padding = {padding[0], padding[1]},
                                 .dilation = {dilation[0], dilation[1]},
                                 .groups = groups};
  // The convolution over a [Ho, Wo] image has ((Ho + 2p - span) / s + 1) rows of windows: H, or one more
  // per stride an output_padding beyond the stride adds (allowed while it is below the dilation). Those
  // rows take zeros here; their outputs are outside the result's contributions.
  const auto rows = p.output_size(Ho, Wo, weight.size(2), weight.size(3));
  auto padded = [N, H, W, rows](const Tensor& t) {
    if (rows[0] == H && rows[1] == W) return internal::contiguous(t);
    Tensor z = zeros({N, t.size(1), rows[0], rows[1]}, {t.dtype(), t.device()});
    Tensor inner = internal::narrow(internal::narrow(z, 2, 0, H), 3, 0, W);
    internal::copy_(inner, t);
    return z;
  };
  const Shape out_shape{N, O, Ho, Wo};
  Tensor out = internal::conv2d_backward_data(padded(x.detach()), weight.detach(), out_shape, p);
  if (bias.defined()) internal::add_(out, internal::reshape(bias.detach(), {1, O, 1, 1}));

  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return batched ? out : internal::squeeze(out, 0);
  const bool grad_x = x.requires_grad(), grad_w = weight.requires_grad();
  const bool grad_b = bias.defined() && bias.requires_grad(), has_bias = bias.defined();
  out = autograd::record("conv_transpose2d", out, inputs,
                         [=, xd = x.detach(), wd = weight.detach()](const Tensor& g) {
    std::vector<Tensor> grads(has_bias ? 3 : 2);
    if (grad_x) {  // the convolution's forward, cropped to the input's windows
      Tensor gx = internal::conv2d_forward(internal::contiguous(g), wd, Tensor(), p);
      grads[0] = (rows[0] == H && rows[1] == W) ? gx : internal::contiguous(internal::narrow(internal::narrow(gx, 2, 0, H), 3, 0, W));
    }
    if (grad_w) grads[1] = internal::conv2d_backward_weight(padded(xd), internal::contiguous(g), wd.shape(), false, p).weight;
    if (grad_b) grads[2] = internal::sum(g, {0, 2, 3});
    return grads;
  });
  return batched ? out : squeeze(out, 0);
}

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias, ExpandingArray<1> stride,
                        ExpandingArray<1> padding, ExpandingArray<1> output_padding, int64_t groups,
                        ExpandingArray<1> dilation) {
  LOCKSTEP_CHECK(input.defined() && weight.defined(), "conv_transpose1d: got an undefined tensor");
  check_transposed<1>("conv_transpose1d", input, weight, bias, stride, padding, output_padding, groups, dilation);
  // Height 1: stride and dilation 1 there, so output_padding 0 is below both.
  Tensor y = conv_transpose2d(unsqueeze(input, input.dim() - 1), unsqueeze(weight, 2), bias, {1, stride[0]},
                              {0, padding[0]}, {0, output_padding[0]}, groups, {1, dilation[0]});
  return squeeze(y, y.dim() - 2);
}

Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, ExpandingArray<3> stride,
                        ExpandingArray<3> padding, ExpandingArray<3> output_padding, int64_t groups,
                        ExpandingArray<3> dilation) {
  LOCKSTEP_CHECK(input.defined() && weight.defined(), "conv_transpose3d: got an undefined tensor");
  check_transposed<3>("conv_transpose3d", input, weight, bias, stride, padding, output_padding, groups, dilation);
  const bool batched = input.dim() == 5;
  Tensor x = batched ? input : unsqueeze(input, 0);
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), kd = weight.size(2);
  const int64_t s = stride[0], d = dilation[0];
  // Depth: input depth i and kernel offset j reach full depth i s + j d; the full depths run to
  // (D - 1) s + (kd - 1) d + output_padding, and the result is that range cropped by `padding` at each end.
  const int64_t full = (D - 1) * s + (kd - 1) * d + output_padding[0] + 1;
  const int64_t Do = full - 2 * padding[0];
  Tensor images = reshape(permute(x, {0, 2, 1, 3, 4}), {N * D, C, x.size(3), x.size(4)});
  Tensor total;
  for (int64_t j = 0; j < kd; ++j) {
    Tensor z = conv_transpose2d(images, select(weight, 2, j), Tensor(), {stride[1], stride[2]},
                                {padding[1], padding[2]}, {output_padding[1], output_padding[2]}, groups,
                                {dilation[1], dilation[2]});                             // [N * D, O, Ho, Wo]
    const int64_t O = z.size(1), Ho = z.size(2), Wo = z.size(3);
    Tensor planes = permute(reshape(z, {N, D, O, Ho, Wo}), {0, 2, 1, 3, 4});              // [N, O, D, Ho, Wo]
    // Depth i to i s: each plane followed by s - 1 planes of zeros, then the tail dropped.
    if (s > 1) {
      Tensor gap = zeros({N, O, D, s - 1, Ho, Wo}, {z.dtype(), z.device()});
      planes = reshape(cat({unsqueeze(planes, 3), gap}, 3), {N, O, D * s, Ho, Wo});
      planes = narrow(planes, 2, 0, (D - 1) * s + 1);
    }
    // Then shifted by j d within the full depth.
    const int64_t before = j * d, after = full - before - planes.size(2);
    std::vector<Tensor> parts;
    if (before) parts.push_back(zeros({N, O, before, Ho, Wo}, {z.dtype(), z.device()}));
    parts.push_back(planes);
    if (after) parts.push_back(zeros({N, O, after, Ho, Wo}, {z.dtype(), z.device()}));
    Tensor placed = parts.size() == 1 ? planes : cat(parts, 2);
    total = j == 0 ? placed : add(total, placed);
  }
  Tensor y = narrow(total, 2, padding[0], Do);
  if (bias.defined()) y = add(y, reshape(bias, {1, bias.numel(), 1, 1, 1}));
  return batched ? y : squeeze(y, 0);
}

}  // namespace lockstep::nn::functional
