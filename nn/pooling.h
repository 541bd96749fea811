// Pooling modules, as torch.nn.MaxPool2d, AvgPool2d and AdaptiveAvgPool2d.
#pragma once

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct MaxPool2dOptions {
  MaxPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<2>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, stride, 1);  // defaults to kernel_size
  LOCKSTEP_ARG(ExpandingArray<2>, padding, 0);
  LOCKSTEP_ARG(ExpandingArray<2>, dilation, 1);
  LOCKSTEP_ARG(bool, ceil_mode, false);
};

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : Module("MaxPool2d"), options(options) {}
  explicit MaxPool2dImpl(ExpandingArray<2> kernel_size) : MaxPool2dImpl(MaxPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& x) {
    return functional::max_pool2d(x, options.kernel_size(), options.stride(), options.padding(), options.dilation(),
                                  options.ceil_mode());
  }
  MaxPool2dOptions options;
};
LOCKSTEP_MODULE(MaxPool2d);

struct AvgPool2dOptions {
  AvgPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<2>, kernel_size, 1);
  LOCKSTEP_ARG(ExpandingArray<2>, stride, 1);  // defaults to kernel_size
  LOCKSTEP_ARG(ExpandingArray<2>, padding, 0);
  LOCKSTEP_ARG(bool, ceil_mode, false);
  LOCKSTEP_ARG(bool, count_include_pad, true);
};

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : Module("AvgPool2d"), options(options) {}
  explicit AvgPool2dImpl(ExpandingArray<2> kernel_size) : AvgPool2dImpl(AvgPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& x) {
    return functional::avg_pool2d(x, options.kernel_size(), options.stride(), options.padding(), options.ceil_mode(),
                                  options.count_include_pad());
  }
  AvgPool2dOptions options;
};
LOCKSTEP_MODULE(AvgPool2d);

struct AdaptiveAvgPool2dOptions {
  AdaptiveAvgPool2dOptions(ExpandingArray<2> output_size) : output_size_(output_size) {}  // NOLINT
  LOCKSTEP_ARG(ExpandingArray<2>, output_size, 1);
};

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options)
      : Module("AdaptiveAvgPool2d"), options(options) {}
  explicit AdaptiveAvgPool2dImpl(ExpandingArray<2> output_size)
      : AdaptiveAvgPool2dImpl(AdaptiveAvgPool2dOptions(output_size)) {}
  Tensor forward(const Tensor& x) { return functional::adaptive_avg_pool2d(x, options.output_size()); }
  AdaptiveAvgPool2dOptions options;
};
LOCKSTEP_MODULE(AdaptiveAvgPool2d);

}  // namespace lockstep::nn
