// F::unfold (im2col) and F::fold (col2im) over the padded image flattened to [N, C, Hp Wp]: one int64 index
// per (kernel offset, block) names the spatial position it reads; unfold is an index_select of those
// positions, fold the index_add of the same positions, so each one's backward is the other.
#include "nn/fold.h"

#include <vector>

#include "nn/functional.h"
#include "tensor/factory.h"

namespace lockstep::nn::functional {

namespace {

struct Window {
  ExpandingArray<2> kernel, dilation, padding, stride;
};

void check_window(const char* fn, const Window& w) {
  LOCKSTEP_CHECK(w.kernel[0] > 0 && w.kernel[1] > 0, fn, ": kernel size should be greater than zero, but got ",
                 "kernel_height: ", w.kernel[0], " kernel_width: ", w.kernel[1]);
  LOCKSTEP_CHECK(w.stride[0] > 0 && w.stride[1] > 0, fn, ": stride should be greater than zero, but got ",
                 "stride_height: ", w.stride[0], " stride_width: ", w.stride[1]);
  LOCKSTEP_CHECK(w.padding[0] >= 0 && w.padding[1] >= 0, fn, ": padding should be non-negative, but got ",
                 "pad_height: ", w.padding[0], " pad_width: ", w.padding[1]);
  LOCKSTEP_CHECK(w.dilation[0] > 0 && w.dilation[1] > 0, fn, ": dilation should be greater than zero, but got ",
                 "dilation_height: ", w.dilation[0], " dilation_width: ", w.dilation[1]);
}

// The number of blocks along spatial dimension i of an image of size n (before padding).
int64_t blocks(const Window& w, int i, int64_t n) {
  return (n + 2 * w.padding[i] - w.dilation[i] * (w.kernel[i] - 1) - 1) / w.stride[i] + 1;
}

// [kH kW L] positions in the padded image flattened to Hp Wp (row width wp): entry (i kW + j) L + oh OW + ow
// is (oh sH + i dH) wp + ow sW + j dW.
Tensor block_positions(const Window& w, int64_t oh_n, int64_t ow_n, int64_t wp, Device device) {
  std::vector<int64_t> pos;
  pos.reserve(static_cast<size_t>(w.kernel[0] * w.kernel[1] * oh_n * ow_n));
  for (int64_t i = 0; i < w.kernel[0]; ++i)
    for (int64_t j = 0; j < w.kernel[1]; ++j)
      for (int64_t oh = 0; oh < oh_n; ++oh)
        for (int64_t ow = 0; ow < ow_n; ++ow)
          pos.push_back((oh * w.stride[0] + i * w.dilation[0]) * wp + ow * w.stride[1] + j * w.dilation[1]);
  const auto n = static_cast<int64_t>(pos.size());
  return tensor(pos, {n}, device);
}

}  // namespace

Tensor unfold(const Tensor& input, const UnfoldFuncOptions& o) {
  const Window w{o.kernel_size(), o.dilation(), o.padding(), o.stride()};
  check_window("unfold", w);
  LOCKSTEP_CHECK(input.defined() && (input.dim() == 3 || input.dim() == 4),
                 "unfold: Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero ",
                 "dimensions for input, but got: ",
                 input.defined() ? input.shape() : Shape{});
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : unsqueeze(input, 0);
  LOCKSTEP_CHECK(x.size(1) > 0 && x.size(2) > 0 && x.size(3) > 0,
                 "unfold: Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero ",
                 "dimensions for input, but got: ", input.shape());
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t oh = blocks(w, 0, h), ow = blocks(w, 1, wd);
  LOCKSTEP_CHECK(oh >= 1 && ow >= 1, "unfold: Given input with spatial size (", h, ", ", wd,
                 "), kernel_size=", w.kernel, ", dilation=", w.dilation, ", padding=", w.padding,
                 ", calculated shape of the array of sliding blocks as (", oh, ", ", ow,
                 "), but its components must be at least one.");
  const int64_t hp = h + 2 * w.padding[0], wp = wd + 2 * w.padding[1], k = w.kernel[0] * w.kernel[1];
  // x: [N, C, H, W] -> [N, C, Hp Wp] -> [N, C, kH kW L] -> [N, C kH kW, L]
  Tensor flat = reshape(pad2d(x, w.padding[1], w.padding[1], w.padding[0], w.padding[0]), {n, c, hp * wp});
  Tensor cols = index_select(flat, 2, block_positions(w, oh, ow, wp, input.device()));
  cols = reshape(cols, {n, c * k, oh * ow});
  return batched ? cols : squeeze(cols, 0);
}

Tensor fold(const Tensor& input, const FoldFuncOptions& o) {
  const Window w{o.kernel_size(), o.dilation(), o.padding(), o.stride()};
  check_window("fold", w);
  LOCKSTEP_CHECK(o.output_size()[0] > 0 && o.output_size()[1] > 0, "fold: output_size should be positive, got ",
                 o.output_size());
  LOCKSTEP_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3),
                 "fold: Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero ",
                 "dimensions for input, but got: ",
                 input.defined() ? input.shape() : Shape{});
  const bool batched = input.dim() == 3;
  Tensor x = batched ? input : unsqueeze(input, 0);
  LOCKSTEP_CHECK(x.size(1) > 0 && x.size(2) > 0,
                 "fold: Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero ",
                 "dimensions for input, but got: ", input.shape());
  const int64_t k = w.kernel[0] * w.kernel[1], n = x.size(0), l = x.size(2);
  LOCKSTEP_CHECK(x.size(1) % k == 0,
                 "fold: Expected size of input's dimension 1 to be divisible by the product of kernel_size, ",
                 "but got input.size(1)=", x.size(1), " and kernel_size=", w.kernel, ".");
  const int64_t h = o.output_size()[0], wd = o.output_size()[1], c = x.size(1) / k;
  const int64_t oh = blocks(w, 0, h), ow = blocks(w, 1, wd);
  LOCKSTEP_CHECK(oh >= 1 && ow >= 1 && oh * ow == l, "fold: Given output_size=", o.output_size(),
                 ", kernel_size=", w.kernel, ", dilation=", w.dilation, ", padding=", w.padding, ", stride=", w.stride,
                 ", expected size of input's dimension 2 to match the calculated number of sliding blocks ", oh, " * ",
                 ow, " = ", oh * ow, ", but got input.size(2)=", l, ".");
  const int64_t hp = h + 2 * w.padding[0], wp = wd + 2 * w.padding[1];
  // x: [N, C kH kW, L] -> [N, C, kH kW L], added into [N, C, Hp Wp] -> [N, C, Hp, Wp] -> [N, C, H, W]
  Tensor cols = reshape(x, {n, c, k * l});
  Tensor image = index_add(zeros({n, c, hp * wp}, {x.dtype(), x.device()}), 2,
                           block_positions(w, oh, ow, wp, input.device()), cols);
  image = reshape(image, {n, c, hp, wp});
  image = narrow(narrow(image, 2, w.padding[0], h), 3, w.padding[1], wd);
  return batched ? image : squeeze(image, 0);
}

}  // namespace lockstep::nn::functional
