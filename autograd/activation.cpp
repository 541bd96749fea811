// torch.nn.functional's activations: each forward is one row of tensor/elementwise_ops.h with its
// parameters as the row's scalars, and each gradient one backward row reading the input (or, for relu6
// and selu, the row they are a setting of).
#include "autograd/autograd_util.h"
#include "autograd/functions.h"
#include "common/check.h"
#include "tensor/factory.h"

namespace lockstep {

using autograd::unary_with;

namespace {
// selu's constants, PyTorch's (Klambauer et al., 2017).
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

Tensor elu_with(const Tensor& a, double alpha, double scale, double input_scale) {
  return unary_with(UnaryOp::Elu, a, BinaryOp::EluBackward, false, {alpha, scale, input_scale});
}
}  // namespace

Tensor elu(const Tensor& a, double alpha) { return elu_with(a, alpha, 1.0, 1.0); }
Tensor selu(const Tensor& a) { return elu_with(a, kSeluAlpha, kSeluScale, 1.0); }
Tensor celu(const Tensor& a, double alpha) {
  LOCKSTEP_CHECK(alpha != 0.0, "celu: alpha must not be 0 (it divides the input), got ", alpha);
  return elu_with(a, alpha, 1.0, 1.0 / alpha);
}

Tensor softplus(const Tensor& a, double beta, double threshold) {
  LOCKSTEP_CHECK(beta != 0.0, "softplus: beta must not be 0 (it divides the result), got ", beta);
  return unary_with(UnaryOp::Softplus, a, BinaryOp::SoftplusBackward, false, {beta, threshold});
}

Tensor hardtanh(const Tensor& a, double min_val, double max_val) {
  LOCKSTEP_CHECK(max_val >= min_val, "hardtanh: max_val (", max_val, ") must be greater than or equal to min_val (",
                 min_val, ")");
  return unary_with(UnaryOp::Hardtanh, a, BinaryOp::HardtanhBackward, false, {min_val, max_val});
}
Tensor relu6(const Tensor& a) { return hardtanh(a, 0.0, 6.0); }

Tensor hardshrink(const Tensor& a, double lambd) {
  return unary_with(UnaryOp::Hardshrink, a, BinaryOp::ShrinkBackward, false, {lambd});
}
Tensor softshrink(const Tensor& a, double lambd) {
  LOCKSTEP_CHECK(lambd >= 0.0, "softshrink: lambda must be greater or equal to 0, but found to be ", lambd);
  return unary_with(UnaryOp::Softshrink, a, BinaryOp::ShrinkBackward, false, {lambd});
}

Tensor threshold(const Tensor& a, double threshold, double value) {
  return unary_with(UnaryOp::Threshold, a, BinaryOp::ThresholdBackward, false, {threshold, value});
}

Tensor leaky_relu(const Tensor& a, double negative_slope) {
  return unary_with(UnaryOp::LeakyRelu, a, BinaryOp::LeakyReluBackward, false, {negative_slope});
}

Tensor hardsigmoid(const Tensor& a) { return unary_with(UnaryOp::Hardsigmoid, a, BinaryOp::HardsigmoidBackward, false); }
Tensor hardswish(const Tensor& a) { return unary_with(UnaryOp::Hardswish, a, BinaryOp::HardswishBackward, false); }
Tensor mish(const Tensor& a) { return unary_with(UnaryOp::Mish, a, BinaryOp::MishBackward, false); }
Tensor logsigmoid(const Tensor& a) { return unary_with(UnaryOp::LogSigmoid, a, BinaryOp::LogSigmoidBackward, false); }
Tensor softsign(const Tensor& a) { return unary_with(UnaryOp::Softsign, a, BinaryOp::SoftsignBackward, false); }
Tensor tanhshrink(const Tensor& a) {
  // d/dx (x - tanh x) = tanh(x)^2: from the input, one tanh in the backward.
  Tensor out = internal::unary(UnaryOp::Tanhshrink, a);
  if (!autograd::any_requires_grad(a)) return out;
  return autograd::record("tanhshrink", out, {a}, [a = a.detach()](const Tensor& g) {
    Tensor t = internal::unary(UnaryOp::Tanh, a);
    return autograd::Grads{internal::mul(g, internal::mul(t, t))};
  });
}

// The compositions: glu, prelu, rrelu, softmin.
Tensor glu(const Tensor& x, int64_t dim) {
  LOCKSTEP_CHECK(x.dim() > 0, "glu: does not take a 0-dimensional tensor");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  LOCKSTEP_CHECK(d >= 0 && d < x.dim(), "glu: dim ", dim, " is out of range for a tensor of shape ", x.shape());
  LOCKSTEP_CHECK(x.size(d) % 2 == 0, "glu: Halving dimension must be even, but dimension ", d, " is size ", x.size(d));
  auto halves = chunk(x, 2, d);
  return mul(halves[0], sigmoid(halves[1]));
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  LOCKSTEP_CHECK(weight.defined() && weight.dim() <= 1, "prelu: weight must be a 0-d or 1-d tensor, got shape ",
                 weight.defined() ? weight.shape() : Shape{});
  const int64_t n = weight.numel();
  Tensor w = weight;
  if (n > 1) {
    LOCKSTEP_CHECK(x.dim() >= 2 && x.size(1) == n, "prelu: weight has ", n,
                   " parameters, which must match the input's channels (dimension 1); input shape ", x.shape());
    Shape s(static_cast<size_t>(x.dim() - 1), 1);  // [C, 1, ..., 1] against [N, C, ...]
    s[0] = n;
    w = reshape(weight, s);
  }
  return where(x >= 0.0, x, mul(w, x));
}

Tensor rrelu(const Tensor& x, double lower, double upper, bool training) {
  LOCKSTEP_CHECK(lower <= upper, "rrelu: lower bound (", lower, ") must not exceed the upper bound (",
                 upper, ")");
  if (!training) return leaky_relu(x, (lower + upper) / 2);
  const Tensor slope = uniform(x.shape(), lower, upper, TensorOptions(x.dtype(), x.device()));
  return where(x >= 0.0, x, mul(x, slope));
}

Tensor softmin(const Tensor& a, int64_t dim) { return softmax(neg(a), dim); }

}  // namespace lockstep
