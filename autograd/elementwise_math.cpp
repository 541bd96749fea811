// Elementwise math beyond arithmetic (rounding, logs and exponentials, trig, the error function,
// remainders, tests for NaN and infinity): each forward one row of tensor/elementwise_ops.h, each
// gradient a short composition below it. The ops PyTorch's CUDA autocast runs in float32 do so here too
// (AutocastOp::Exp).
#include <cmath>

#include "autograd/autocast.h"
#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
using autograd::reduce_grad;
namespace in = internal;
namespace amp = autograd::amp;

namespace {

// out = op(a); d/da = g * derivative(a, out).
template <typename D>
Tensor unary_grad(UnaryOp op, const Tensor& a_in, bool fp32_under_autocast, D derivative) {
  const Tensor a = fp32_under_autocast ? amp::cast_input(amp::AutocastOp::Exp, a_in) : a_in;
  Tensor out = in::unary(op, a);
  if (!any_requires_grad(a)) return out;
  return record(op_name(op), out, {a}, [a = a.detach(), o = out.detach(), derivative](const Tensor& g) {
    return Grads{in::mul(g, derivative(a, o))};
  });
}

// Rounding: piecewise constant, so the gradient is 0 (PyTorch's).
Tensor rounding(UnaryOp op, const Tensor& a) {
  Tensor out = in::unary(op, a);
  if (!any_requires_grad(a)) return out;
  return record(op_name(op), out, {a}, [](const Tensor& g) { return Grads{zeros_like(g)}; });
}

// 1 - x^2, for asin and acos.
Tensor one_minus_square(const Tensor& x) { return in::add(in::neg(in::mul(x, x)), 1.0); }

constexpr double kTwoOverSqrtPi = 1.12837916709551257390;  // 2 / sqrt(pi)

}  // namespace

Tensor floor(const Tensor& a) { return rounding(UnaryOp::Floor, a); }
Tensor ceil(const Tensor& a) { return rounding(UnaryOp::Ceil, a); }
Tensor round(const Tensor& a) { return rounding(UnaryOp::Round, a); }
Tensor trunc(const Tensor& a) { return rounding(UnaryOp::Trunc, a); }

Tensor frac(const Tensor& a) {
  Tensor out = in::unary(UnaryOp::Frac, a);
  if (!any_requires_grad(a)) return out;
  return record("frac", out, {a}, [](const Tensor& g) { return Grads{g}; });
}

Tensor reciprocal(const Tensor& a) {
  return unary_grad(UnaryOp::Reciprocal, a, true, [](const Tensor&, const Tensor& o) { return in::neg(in::mul(o, o)); });
}
Tensor log1p(const Tensor& a) {
  return unary_grad(UnaryOp::Log1p, a, true,
                    [](const Tensor& x, const Tensor&) { return in::unary(UnaryOp::Reciprocal, in::add(x, 1.0)); });
}
Tensor expm1(const Tensor& a) {
  return unary_grad(UnaryOp::Expm1, a, true, [](const Tensor&, const Tensor& o) { return in::add(o, 1.0); });
}
Tensor log2(const Tensor& a) {
  return unary_grad(UnaryOp::Log2, a, true, [](const Tensor& x, const Tensor&) {
    return in::unary(UnaryOp::Reciprocal, in::mul(x, std::log(2.0)));
  });
}
Tensor log10(const Tensor& a) {
  return unary_grad(UnaryOp::Log10, a, true, [](const Tensor& x, const Tensor&) {
    return in::unary(UnaryOp::Reciprocal, in::mul(x, std::log(10.0)));
  });
}
Tensor erf(const Tensor& a) {  // 2/sqrt(pi) e^(-x^2)
  return unary_grad(UnaryOp::Erf, a, false, [](const Tensor& x, const Tensor&) {
    return in::mul(in::exp(in::neg(in::mul(x, x))), kTwoOverSqrtPi);
  });
}
Tensor erfc(const Tensor& a) {
  return unary_grad(UnaryOp::Erfc, a, false, [](const Tensor& x, const Tensor&) {
    return in::mul(in::exp(in::neg(in::mul(x, x))), -kTwoOverSqrtPi);
  });
}
Tensor erfinv(const Tensor& a) {  // sqrt(pi)/2 e^(y^2)
  return unary_grad(UnaryOp::Erfinv, a, true, [](const Tensor&, const Tensor& o) {
    return in::mul(in::exp(in::mul(o, o)), 1.0 / kTwoOverSqrtPi);
  });
}
Tensor tan(const Tensor& a) {
  return unary_grad(UnaryOp::Tan, a, true, [](const Tensor&, const Tensor& o) { return in::add(in::mul(o, o), 1.0); });
}
Tensor asin(const Tensor& a) {
  return unary_grad(UnaryOp::Asin, a, true,
                    [](const Tensor& x, const Tensor&) { return in::unary(UnaryOp::Rsqrt, one_minus_square(x)); });
}
Tensor acos(const Tensor& a) {
  return unary_grad(UnaryOp::Acos, a, true, [](const Tensor& x, const Tensor&) {
    return in::neg(in::unary(UnaryOp::Rsqrt, one_minus_square(x)));
  });
}
Tensor atan(const Tensor& a) {
  return unary_grad(UnaryOp::Atan, a, false, [](const Tensor& x, const Tensor&) {
    return in::unary(UnaryOp::Reciprocal, in::add(in::mul(x, x), 1.0));
  });
}
Tensor sinh(const Tensor& a) {
  return unary_grad(UnaryOp::Sinh, a, true, [](const Tensor& x, const Tensor&) { return in::unary(UnaryOp::Cosh, x); });
}
Tensor cosh(const Tensor& a) {
  return unary_grad(UnaryOp::Cosh, a, true, [](const Tensor& x, const Tensor&) { return in::unary(UnaryOp::Sinh, x); });
}

Tensor atan2(const Tensor& a, const Tensor& b) {
  Tensor out = in::binary(BinaryOp::Atan2, a, b);
  if (!any_requires_grad(a, b)) return out;
  return record("atan2", out, {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    // d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
    Tensor r = in::div(g, in::add(in::mul(a, a), in::mul(b, b)));
    return Grads{reduce_grad(in::mul(r, b), a.shape(), a.dtype()), reduce_grad(in::neg(in::mul(r, a)), b.shape(), b.dtype())};
  });
}

namespace {
// fmod and remainder: a - q b with q = trunc(a / b) (fmod) or floor(a / b) (remainder); d/da = 1,
// d/db = -q, as PyTorch's.
Tensor remainder_like(BinaryOp op, UnaryOp quotient, const Tensor& a, const Tensor& b) {
  Tensor out = in::binary(op, a, b);
  if (!any_requires_grad(a, b)) return out;
  return record(op_name(op), out, {a, b}, [a = a.detach(), b = b.detach(), quotient](const Tensor& g) {
    Tensor q = in::unary(quotient, in::div(a, b));
    return Grads{reduce_grad(g, a.shape(), a.dtype()), reduce_grad(in::neg(in::mul(g, q)), b.shape(), b.dtype())};
  });
}
Tensor remainder_like(BinaryOp op, const Tensor& a, double b) {
  Tensor out = in::binary_scalar(op, a, b);
  if (!any_requires_grad(a)) return out;
  return record(op_name(op), out, {a}, [](const Tensor& g) { return Grads{g}; });
}
}  // namespace

Tensor fmod(const Tensor& a, const Tensor& b) { return remainder_like(BinaryOp::Fmod, UnaryOp::Trunc, a, b); }
Tensor fmod(const Tensor& a, double b) { return remainder_like(BinaryOp::Fmod, a, b); }
Tensor remainder(const Tensor& a, const Tensor& b) { return remainder_like(BinaryOp::Remainder, UnaryOp::Floor, a, b); }
Tensor remainder(const Tensor& a, double b) { return remainder_like(BinaryOp::Remainder, a, b); }

Tensor clamp_min(const Tensor& a, double min) { return clamp(a, min, std::nullopt); }
Tensor clamp_max(const Tensor& a, double max) { return clamp(a, std::nullopt, max); }

Tensor isnan(const Tensor& a) { return in::unary(UnaryOp::IsNan, a); }
Tensor isinf(const Tensor& a) { return in::unary(UnaryOp::IsInf, a); }
Tensor isfinite(const Tensor& a) { return in::unary(UnaryOp::IsFinite, a); }

}  // namespace lockstep
