// Fold and Unfold, as torch.nn.Fold / Unfold (col2im / im2col), with LibTorch's options and F:: forms:
//   F::unfold(x, F::UnfoldFuncOptions({2, 3}).padding(1).stride(2))    -> [N, C kH kW, L]
//   nn::Fold(nn::FoldOptions({4, 5}, {2, 2}))                           -> [N, C, 4, 5]
// Unfold pads the image and picks every block's elements with one index_select over the flattened
// spatial positions; Fold is its adjoint, the same indices' index_add (overlapping blocks sum), so the
// gradient of each is the other.
#pragma once

#include "autograd/functions.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct FoldOptions {
  FoldOptions(ExpandingArray<2> output_size, ExpandingArray<2> kernel_size)
      : output_size_(output_size), kernel_size_(kernel_size) {}
  LOCKSTEP_ARG(ExpandingArray<2>, output_size, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, dilation, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<2>, stride, 1);
};
struct UnfoldOptions {
  UnfoldOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<2>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, dilation, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<2>, stride, 1);
};

namespace functional {
using FoldFuncOptions = FoldOptions;
using UnfoldFuncOptions = UnfoldOptions;

// [N, C, H, W] or [C, H, W] -> [N, C kH kW, L] or [C kH kW, L]: column c kH kW + i kW + j of block l holds
// the padded image at (oh sH + i dH, ow sW + j dW), l = oh OW + ow, OH = (H + 2 pH - dH (kH - 1) - 1) / sH + 1.
Tensor unfold(const Tensor& input, const UnfoldFuncOptions& options);
// [N, C kH kW, L] or [C kH kW, L] -> [N, C, H, W] or [C, H, W], (H, W) = output_size: each block's values
// added where unfold would have read them, the padding dropped.
Tensor fold(const Tensor& input, const FoldFuncOptions& options);
}  // namespace functional

class FoldImpl : public Module {
 public:
  explicit FoldImpl(const FoldOptions& options) : Module("Fold"), options(options) {}
  FoldImpl(ExpandingArray<2> output_size, ExpandingArray<2> kernel_size)
      : FoldImpl(FoldOptions(output_size, kernel_size)) {}
  Tensor forward(const Tensor& input) { return functional::fold(input, options); }
  FoldOptions options;
};
LOCKSTEP_MODULE(Fold);

class UnfoldImpl : public Module {
 public:
  explicit UnfoldImpl(const UnfoldOptions& options) : Module("Unfold"), options(options) {}
  explicit UnfoldImpl(ExpandingArray<2> kernel_size) : UnfoldImpl(UnfoldOptions(kernel_size)) {}
  Tensor forward(const Tensor& input) { return functional::unfold(input, options); }
  UnfoldOptions options;
};
LOCKSTEP_MODULE(Unfold);

}  // namespace lockstep::nn
