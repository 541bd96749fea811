// Dropout and its variants, as torch.nn.Dropout, Dropout1d/2d/3d, AlphaDropout and FeatureAlphaDropout,
// with LibTorch's options and F:: forms:
//   nn::Dropout2d(nn::Dropout2dOptions(0.2))    F::alpha_dropout(x, F::AlphaDropoutFuncOptions().p(0.1).training(true))
// In train() Dropout zeroes each element with probability p and scales the rest by 1 / (1 - p); the
// channel variants draw one keep/drop per (sample, channel) and apply it to the whole feature map; the
// alpha variants set dropped values to SELU's negative saturation and apply the affine map that keeps
// zero mean and unit variance (nn/dropout.cpp). In eval() every one passes its input through unchanged.
// `inplace` is accepted for LibTorch's spelling; the result is always a new tensor.
#pragma once

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: Dropout2d(0.2)
  LOCKSTEP_ARG(double, p, 0.5);
  LOCKSTEP_ARG(bool, inplace, false);
};
using Dropout1dOptions = DropoutOptions;
using Dropout2dOptions = DropoutOptions;
using Dropout3dOptions = DropoutOptions;
using AlphaDropoutOptions = DropoutOptions;
using FeatureAlphaDropoutOptions = DropoutOptions;

namespace functional {
struct DropoutFuncOptions {
  LOCKSTEP_ARG(double, p, 0.5);
  LOCKSTEP_ARG(bool, training, true);
  LOCKSTEP_ARG(bool, inplace, false);
};
using Dropout1dFuncOptions = DropoutFuncOptions;
using Dropout2dFuncOptions = DropoutFuncOptions;
using Dropout3dFuncOptions = DropoutFuncOptions;
// As LibTorch's, off unless training(true) is given.
struct AlphaDropoutFuncOptions {
  LOCKSTEP_ARG(double, p, 0.5);
  LOCKSTEP_ARG(bool, training, false);
  LOCKSTEP_ARG(bool, inplace, false);
};
using FeatureAlphaDropoutFuncOptions = AlphaDropoutFuncOptions;

inline Tensor dropout(const Tensor& x, const DropoutFuncOptions& o) {
  return lockstep::dropout(x, o.p(), o.training());
}
// Channel dropout: one draw per channel of [N, C, L] / [C, L] (1d), [N, C, H, W] / [C, H, W] (2d),
// [N, C, D, H, W] / [C, D, H, W] (3d), kept channels scaled by 1 / (1 - p).
Tensor dropout1d(const Tensor& input, const Dropout1dFuncOptions& options = {});
Tensor dropout2d(const Tensor& input, const Dropout2dFuncOptions& options = {});
Tensor dropout3d(const Tensor& input, const Dropout3dFuncOptions& options = {});
// Per element: kept x -> a x + alpha a p, dropped -> -alpha a + alpha a p, with alpha = 1.7580993408473766
// (SELU's scale * alpha) and a = 1 / sqrt((alpha^2 p + 1)(1 - p)); p = 1 gives zeros.
Tensor alpha_dropout(const Tensor& input, const AlphaDropoutFuncOptions& options = {});
// The same with one draw per (sample, channel) of an input [N, C, ...].
Tensor feature_alpha_dropout(const Tensor& input, const FeatureAlphaDropoutFuncOptions& options = {});
}  // namespace functional

class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5) : Module("Dropout"), p(p) {
    LOCKSTEP_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, but got ", p);
  }
  explicit DropoutImpl(const DropoutOptions& options) : DropoutImpl(options.p()) {}
  Tensor forward(const Tensor& input) { return functional::dropout(input, p, is_training()); }
  void pretty_print(std::ostream& os) const override;
  double p;
};
LOCKSTEP_MODULE(Dropout);

namespace detail {
// The variants: Draw::run calls the functional form with the module's p and mode.
template <Tensor (*Fn)(const Tensor&, const functional::DropoutFuncOptions&)>
struct ChannelDropoutFn {
  static Tensor run(const Tensor& x, double p, bool training) {
    return Fn(x, functional::DropoutFuncOptions().p(p).training(training));
  }
};
template <Tensor (*Fn)(const Tensor&, const functional::AlphaDropoutFuncOptions&)>
struct AlphaDropoutFn {
  static Tensor run(const Tensor& x, double p, bool training) {
    return Fn(x, functional::AlphaDropoutFuncOptions().p(p).training(training));
  }
};
template <typename Draw>
class DropoutVariantImpl : public Module {
 public:
  DropoutVariantImpl(const DropoutOptions& options, const char* name) : Module(name), options(options) {
    LOCKSTEP_CHECK(options.p() >= 0 && options.p() <= 1, name, ": dropout probability has to be between 0 and 1, "
                   "but got ", options.p());
  }
  Tensor forward(const Tensor& input) { return Draw::run(input, options.p(), is_training()); }
  DropoutOptions options;
};
}  // namespace detail

#define LOCKSTEP_DROPOUT_MODULE(Name, Fn)                                                          \
  class Name##Impl : public detail::DropoutVariantImpl<Fn> {                                       \
   public:                                                                                         \
    explicit Name##Impl(const DropoutOptions& options = {}) : DropoutVariantImpl(options, #Name) {} \
  };                                                                                               \
  LOCKSTEP_MODULE(Name)
LOCKSTEP_DROPOUT_MODULE(Dropout1d, detail::ChannelDropoutFn<functional::dropout1d>);
LOCKSTEP_DROPOUT_MODULE(Dropout2d, detail::ChannelDropoutFn<functional::dropout2d>);
LOCKSTEP_DROPOUT_MODULE(Dropout3d, detail::ChannelDropoutFn<functional::dropout3d>);
LOCKSTEP_DROPOUT_MODULE(AlphaDropout, detail::AlphaDropoutFn<functional::alpha_dropout>);
LOCKSTEP_DROPOUT_MODULE(FeatureAlphaDropout, detail::AlphaDropoutFn<functional::feature_alpha_dropout>);
#undef LOCKSTEP_DROPOUT_MODULE

}  // namespace lockstep::nn
