// Activation modules and their nn::functional forms, with LibTorch's names and options:
//   nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2))    F::elu(x, F::ELUFuncOptions().alpha(2))
// Each runs one elementwise row (autograd/activation.cpp) or a short composition of them. `inplace` is
// accepted for LibTorch's spelling; the result is always a new tensor (what the caller uses in either case).
#pragma once

#include <string>

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

struct ReLUOptions {
  ReLUOptions(bool inplace = false) : inplace_(inplace) {}  // NOLINT
  LOCKSTEP_ARG(bool, inplace, false);
};
using ReLU6Options = ReLUOptions;
using SELUOptions = ReLUOptions;
struct ELUOptions {
  LOCKSTEP_ARG(double, alpha, 1.0);
  LOCKSTEP_ARG(bool, inplace, false);
};
using CELUOptions = ELUOptions;
struct GELUOptions {
  LOCKSTEP_ARG(std::string, approximate, "none");  // or "tanh"
};
struct LeakyReLUOptions {
  LeakyReLUOptions(double negative_slope = 0.01) : negative_slope_(negative_slope) {}  // NOLINT: F::leaky_relu(x, 0.2)
  LOCKSTEP_ARG(double, negative_slope, 0.01);
  LOCKSTEP_ARG(bool, inplace, false);
};
struct SoftplusOptions {
  LOCKSTEP_ARG(double, beta, 1.0);
  LOCKSTEP_ARG(double, threshold, 20.0);
};
struct HardtanhOptions {
  LOCKSTEP_ARG(double, min_val, -1.0);
  LOCKSTEP_ARG(double, max_val, 1.0);
  LOCKSTEP_ARG(bool, inplace, false);
};
struct HardshrinkOptions {
  HardshrinkOptions(double lambda = 0.5) : lambda_(lambda) {}  // NOLINT
  LOCKSTEP_ARG(double, lambda, 0.5);
};
using SoftshrinkOptions = HardshrinkOptions;
struct ThresholdOptions {
  ThresholdOptions(double threshold, double value) : threshold_(threshold), value_(value) {}
  LOCKSTEP_ARG(double, threshold, 0.0);
  LOCKSTEP_ARG(double, value, 0.0);
  LOCKSTEP_ARG(bool, inplace, false);
};
struct SoftmaxOptions {
  SoftmaxOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, dim, -1);
};
using SoftminOptions = SoftmaxOptions;
using LogSoftmaxOptions = SoftmaxOptions;
struct GLUOptions {
  GLUOptions(int64_t dim = -1) : dim_(dim) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, dim, -1);
};
struct PReLUOptions {
  LOCKSTEP_ARG(int64_t, num_parameters, 1);  // 1, or the input's channels (dimension 1)
  LOCKSTEP_ARG(double, init, 0.25);
};
struct RReLUOptions {
  LOCKSTEP_ARG(double, lower, 1.0 / 8.0);
  LOCKSTEP_ARG(double, upper, 1.0 / 3.0);
  LOCKSTEP_ARG(bool, inplace, false);
};

namespace functional {
using ELUFuncOptions = ELUOptions;
using CELUFuncOptions = CELUOptions;
using SELUFuncOptions = SELUOptions;
using GELUFuncOptions = GELUOptions;
using LeakyReLUFuncOptions = LeakyReLUOptions;
using SoftplusFuncOptions = SoftplusOptions;
using HardtanhFuncOptions = HardtanhOptions;
using HardshrinkFuncOptions = HardshrinkOptions;
using SoftshrinkFuncOptions = SoftshrinkOptions;
using ThresholdFuncOptions = ThresholdOptions;
using SoftmaxFuncOptions = SoftmaxOptions;
using SoftminFuncOptions = SoftminOptions;
using LogSoftmaxFuncOptions = LogSoftmaxOptions;
using GLUFuncOptions = GLUOptions;
using RReLUFuncOptions = RReLUOptions;

inline Tensor elu(const Tensor& x, const ELUFuncOptions& o = {}) { return lockstep::elu(x, o.alpha()); }
inline Tensor celu(const Tensor& x, const CELUFuncOptions& o = {}) { return lockstep::celu(x, o.alpha()); }
inline Tensor selu(const Tensor& x, const SELUFuncOptions& = {}) { return lockstep::selu(x); }
inline Tensor gelu(const Tensor& x, const GELUFuncOptions& o) { return lockstep::gelu(x, o.approximate()); }
// One function, not an overload per spelling, so that nn::Functional(F::leaky_relu, 0.2) can name it.
inline Tensor leaky_relu(const Tensor& x, const LeakyReLUFuncOptions& o = {}) {
  return lockstep::leaky_relu(x, o.negative_slope());
}
inline Tensor softplus(const Tensor& x, const SoftplusFuncOptions& o = {}) {
  return lockstep::softplus(x, o.beta(), o.threshold());
}
inline Tensor hardtanh(const Tensor& x, const HardtanhFuncOptions& o = {}) {
  return lockstep::hardtanh(x, o.min_val(), o.max_val());
}
inline Tensor relu6(const Tensor& x, const ReLU6Options& = {}) { return lockstep::relu6(x); }
inline Tensor hardshrink(const Tensor& x, const HardshrinkFuncOptions& o = {}) {
  return lockstep::hardshrink(x, o.lambda());
}
inline Tensor softshrink(const Tensor& x, const SoftshrinkFuncOptions& o = {}) {
  return lockstep::softshrink(x, o.lambda());
}
inline Tensor threshold(const Tensor& x, const ThresholdFuncOptions& o) {
  return lockstep::threshold(x, o.threshold(), o.value());
}
inline Tensor hardsigmoid(const Tensor& x) { return lockstep::hardsigmoid(x); }
inline Tensor hardswish(const Tensor& x) { return lockstep::hardswish(x); }
inline Tensor mish(const Tensor& x) { return lockstep::mish(x); }
inline Tensor logsigmoid(const Tensor& x) { return lockstep::logsigmoid(x); }
inline Tensor softsign(const Tensor& x) { return lockstep::softsign(x); }
inline Tensor tanhshrink(const Tensor& x) { return lockstep::tanhshrink(x); }
inline Tensor softmax(const Tensor& x, const SoftmaxFuncOptions& o) { return lockstep::softmax(x, o.dim()); }
inline Tensor log_softmax(const Tensor& x, const LogSoftmaxFuncOptions& o) {
  return lockstep::log_softmax(x, o.dim());
}
inline Tensor softmin(const Tensor& x, int64_t dim) { return lockstep::softmin(x, dim); }
inline Tensor softmin(const Tensor& x, const SoftminFuncOptions& o) { return lockstep::softmin(x, o.dim()); }
inline Tensor glu(const Tensor& x, int64_t dim = -1) { return lockstep::glu(x, dim); }
inline Tensor glu(const Tensor& x, const GLUFuncOptions& o) { return lockstep::glu(x, o.dim()); }
// softmax((logits + g) / tau) with g Gumbel(0, 1) noise from the default generator; with hard, the one-hot
// of its argmax carrying the soft sample's gradient (straight-through), as torch's gumbel_softmax.
struct GumbelSoftmaxFuncOptions {
  LOCKSTEP_ARG(double, tau, 1.0);
  LOCKSTEP_ARG(bool, hard, false);
  LOCKSTEP_ARG(int64_t, dim, -1);
};
Tensor gumbel_softmax(const Tensor& logits, const GumbelSoftmaxFuncOptions& options = {});
inline Tensor prelu(const Tensor& x, const Tensor& weight) { return lockstep::prelu(x, weight); }
inline Tensor rrelu(const Tensor& x, const RReLUFuncOptions& o = {}, bool training = false) {
  return lockstep::rrelu(x, o.lower(), o.upper(), training);
}
}  // namespace functional

// Modules without parameters: forward(x) = f(x).
#define LOCKSTEP_ACTIVATION(Name, Opts, call)                                          \
  class Name##Impl : public Module {                                                   \
   public:                                                                             \
    explicit Name##Impl(const Opts& options = {}) : Module(#Name), options(options) {} \
    Tensor forward(const Tensor& input) { return call; }                               \
    Opts options;                                                                      \
  };                                                                                   \
  LOCKSTEP_MODULE(Name)

struct NoOptions {};

LOCKSTEP_ACTIVATION(ReLU, ReLUOptions, lockstep::relu(input));
LOCKSTEP_ACTIVATION(ReLU6, ReLU6Options, lockstep::relu6(input));
LOCKSTEP_ACTIVATION(SELU, SELUOptions, lockstep::selu(input));
LOCKSTEP_ACTIVATION(ELU, ELUOptions, functional::elu(input, options));
LOCKSTEP_ACTIVATION(CELU, CELUOptions, functional::celu(input, options));
LOCKSTEP_ACTIVATION(Softplus, SoftplusOptions, functional::softplus(input, options));
LOCKSTEP_ACTIVATION(Hardtanh, HardtanhOptions, functional::hardtanh(input, options));
LOCKSTEP_ACTIVATION(Hardshrink, HardshrinkOptions, functional::hardshrink(input, options));
LOCKSTEP_ACTIVATION(Softshrink, SoftshrinkOptions, functional::softshrink(input, options));
LOCKSTEP_ACTIVATION(Tanh, NoOptions, lockstep::tanh(input));
LOCKSTEP_ACTIVATION(Sigmoid, NoOptions, lockstep::sigmoid(input));
LOCKSTEP_ACTIVATION(SiLU, NoOptions, lockstep::silu(input));
LOCKSTEP_ACTIVATION(Mish, NoOptions, lockstep::mish(input));
LOCKSTEP_ACTIVATION(Hardsigmoid, NoOptions, lockstep::hardsigmoid(input));
LOCKSTEP_ACTIVATION(Hardswish, NoOptions, lockstep::hardswish(input));
LOCKSTEP_ACTIVATION(LogSigmoid, NoOptions, lockstep::logsigmoid(input));
LOCKSTEP_ACTIVATION(Softsign, NoOptions, lockstep::softsign(input));
LOCKSTEP_ACTIVATION(Tanhshrink, NoOptions, lockstep::tanhshrink(input));
LOCKSTEP_ACTIVATION(Softmax2d, NoOptions, lockstep::softmax(input, -3));  // over the channels of [(N,) C, H, W]
LOCKSTEP_ACTIVATION(GLU, GLUOptions, functional::glu(input, options));
#undef LOCKSTEP_ACTIVATION

// approximate: "none" (erf) or "tanh", as torch.nn.GELU.
class GELUImpl : public Module {
 public:
  explicit GELUImpl(const GELUOptions& options = {}) : Module("GELU"), options(options) {}
  explicit GELUImpl(std::string approximate) : GELUImpl(GELUOptions().approximate(std::move(approximate))) {}
  Tensor forward(const Tensor& input) { return lockstep::gelu(input, options.approximate()); }
  GELUOptions options;
};
LOCKSTEP_MODULE(GELU);

class LeakyReLUImpl : public Module {
 public:
  explicit LeakyReLUImpl(const LeakyReLUOptions& options = {}) : Module("LeakyReLU"), options(options) {}
  explicit LeakyReLUImpl(double negative_slope) : LeakyReLUImpl(LeakyReLUOptions().negative_slope(negative_slope)) {}
  Tensor forward(const Tensor& input) { return lockstep::leaky_relu(input, options.negative_slope()); }
  LeakyReLUOptions options;
};
LOCKSTEP_MODULE(LeakyReLU);

class ThresholdImpl : public Module {
 public:
  explicit ThresholdImpl(const ThresholdOptions& options) : Module("Threshold"), options(options) {}
  ThresholdImpl(double threshold, double value) : ThresholdImpl(ThresholdOptions(threshold, value)) {}
  Tensor forward(const Tensor& input) { return functional::threshold(input, options); }
  ThresholdOptions options;
};
LOCKSTEP_MODULE(Threshold);

// Softmax, Softmin and LogSoftmax over `dim`.
#define LOCKSTEP_SOFTMAX_MODULE(Name, call)                                                         \
  class Name##Impl : public Module {                                                                \
   public:                                                                                          \
    explicit Name##Impl(const Name##Options& options) : Module(#Name), options(options), dim(options.dim()) {} \
    explicit Name##Impl(int64_t dim) : Name##Impl(Name##Options(dim)) {}                            \
    Tensor forward(const Tensor& input) { return call; }                                            \
    Name##Options options;                                                                          \
    int64_t dim;                                                                                    \
  };                                                                                                \
  LOCKSTEP_MODULE(Name)
LOCKSTEP_SOFTMAX_MODULE(Softmax, lockstep::softmax(input, dim));
LOCKSTEP_SOFTMAX_MODULE(Softmin, functional::softmin(input, dim));
LOCKSTEP_SOFTMAX_MODULE(LogSoftmax, lockstep::log_softmax(input, dim));
#undef LOCKSTEP_SOFTMAX_MODULE

// A learnt negative slope: parameter "weight" [num_parameters], filled with `init`.
class PReLUImpl : public Module {
 public:
  explicit PReLUImpl(const PReLUOptions& options = {});
  Tensor forward(const Tensor& input) { return functional::prelu(input, weight); }
  PReLUOptions options;
  Tensor weight;
};
LOCKSTEP_MODULE(PReLU);

class RReLUImpl : public Module {
 public:
  explicit RReLUImpl(const RReLUOptions& options = {}) : Module("RReLU"), options(options) {}
  Tensor forward(const Tensor& input) { return functional::rrelu(input, options, is_training()); }
  RReLUOptions options;
};
LOCKSTEP_MODULE(RReLU);

}  // namespace lockstep::nn
