// Differentiable elementwise ops: each forward is a row of tensor/elementwise_ops.h run through the ops
// layer, and its backward sits right below it, capturing only what the gradient needs.
#include "autograd/autocast.h"
#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
using autograd::reduce_grad;
constexpr autograd::Output kSavesOutput = autograd::Output::Saved;
namespace in = internal;

using autograd::unary_with;

namespace {

Tensor compare(BinaryOp op, const Tensor& a, const Tensor& b) { return in::binary(op, a, b); }

}  // namespace

// --- arithmetic ----------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = in::add(a, b);
  if (!any_requires_grad(a, b)) return out;
  return record("add", out, {a, b}, [sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype()](const Tensor& g) {
    return Grads{reduce_grad(g, sa, da), reduce_grad(g, sb, db)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = in::sub(a, b);
  if (!any_requires_grad(a, b)) return out;
  return record("sub", out, {a, b}, [sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype()](const Tensor& g) {
    return Grads{reduce_grad(g, sa, da), reduce_grad(in::neg(g), sb, db)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = in::mul(a, b);
  if (!any_requires_grad(a, b)) return out;
  bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("mul", out, {a, b}, [a = a.detach(), b = b.detach(), ra, rb](const Tensor& g) {
    return Grads{ra ? reduce_grad(in::mul(g, b), a.shape(), a.dtype()) : Tensor(),
                 rb ? reduce_grad(in::mul(g, a), b.shape(), b.dtype()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = in::div(a, b);
  if (!any_requires_grad(a, b)) return out;
  bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("div", out, {a, b},
                [sa = a.shape(), da = a.dtype(), b = b.detach(), out = out.detach(), ra, rb](const Tensor& g) {
                  Tensor gb;  // d(a/b)/db = -(a/b)/b
                  if (rb) gb = reduce_grad(in::neg(in::div(in::mul(g, out), b)), b.shape(), b.dtype());
                  return Grads{ra ? reduce_grad(in::div(g, b), sa, da) : Tensor(), gb};
                },
                kSavesOutput);
}

Tensor add(const Tensor& a, double s) {
  Tensor out = in::add(a, s);
  if (!any_requires_grad(a)) return out;
  return record("add_scalar", out, {a}, [](const Tensor& g) { return Grads{g}; });
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = in::mul(a, s);
  if (!any_requires_grad(a)) return out;
  return record("mul_scalar", out, {a}, [s](const Tensor& g) { return Grads{in::mul(g, s)}; });
}

Tensor rsub(const Tensor& a, double s) {
  Tensor out = in::binary_scalar(BinaryOp::Sub, a, s, true);
  if (!any_requires_grad(a)) return out;
  return record("rsub", out, {a}, [](const Tensor& g) { return Grads{in::neg(g)}; });
}

Tensor rdiv(const Tensor& a, double s) {
  Tensor out = in::binary_scalar(BinaryOp::Div, a, s, true);
  if (!any_requires_grad(a)) return out;
  return record("rdiv", out, {a}, [a = a.detach(), out = out.detach()](const Tensor& g) {
    return Grads{in::neg(in::div(in::mul(g, out), a))};
  }, kSavesOutput);
}

Tensor pow(const Tensor& a_in, double e) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Exp, a_in);
  Tensor out = in::binary_scalar(BinaryOp::Pow, a, e);
  if (!any_requires_grad(a)) return out;
  return record("pow_scalar", out, {a}, [a = a.detach(), e](const Tensor& g) {
    if (e == 0) return Grads{in::mul(g, 0.0)};
    return Grads{in::mul(in::mul(g, in::binary_scalar(BinaryOp::Pow, a, e - 1)), e)};
  });
}

Tensor pow(const Tensor& a, const Tensor& e) {
  Tensor out = in::binary(BinaryOp::Pow, a, e);
  if (!any_requires_grad(a, e)) return out;
  bool ra = a.requires_grad(), re = e.requires_grad();
  return record("pow", out, {a, e}, [a = a.detach(), e = e.detach(), out = out.detach(), ra, re](const Tensor& g) {
    Tensor ga, ge;  // d/da = e a^(e-1); d/de = a^e log(a)
    if (ra) ga = reduce_grad(in::mul(g, in::mul(e, in::binary(BinaryOp::Pow, a, in::add(e, -1.0)))), a.shape(), a.dtype());
    if (re) ge = reduce_grad(in::mul(g, in::mul(out, in::log(a))), e.shape(), e.dtype());
    return Grads{ga, ge};
  }, kSavesOutput);
}

// torch.maximum / minimum: the gradient goes to the larger (smaller) operand, split evenly on ties.
static Tensor extremum(const Tensor& a, const Tensor& b, bool is_max) {
  Tensor out = in::binary(is_max ? BinaryOp::Maximum : BinaryOp::Minimum, a, b);
  if (!any_requires_grad(a, b)) return out;
  return record(is_max ? "maximum" : "minimum", out, {a, b}, [a = a.detach(), b = b.detach(), is_max](const Tensor& g) {
    Tensor zero = zeros({}, {g.dtype(), g.device()});
    Tensor wins_a = in::binary(is_max ? BinaryOp::Gt : BinaryOp::Lt, a, b), tie = in::eq(a, b);
    Tensor half = in::mul(g, 0.5);
    Tensor ga = in::where(wins_a, g, in::where(tie, half, zero));
    Tensor gb = in::where(wins_a, zero, in::where(tie, half, g));
    return Grads{reduce_grad(ga, a.shape(), a.dtype()), reduce_grad(gb, b.shape(), b.dtype())};
  });
}
Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(a, b, false); }

Tensor clamp(const Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  LOCKSTEP_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  Tensor out = a;
  if (lo) out = in::binary_scalar(BinaryOp::Maximum, out, *lo);
  if (hi) out = in::binary_scalar(BinaryOp::Minimum, out, *hi);
  if (out.is_same(a)) out = in::clone(a);
  if (!any_requires_grad(a)) return out;
  // The gradient passes where lo <= a <= hi, as PyTorch's.
  return record("clamp", out, {a}, [a = a.detach(), lo, hi](const Tensor& g) {
    Tensor keep;
    if (lo) keep = in::binary_scalar(BinaryOp::Ge, a, *lo);
    if (hi) {
      Tensor below = in::binary_scalar(BinaryOp::Le, a, *hi);
      keep = keep.defined() ? in::binary(BinaryOp::LogicalAnd, keep, below) : below;
    }
    return Grads{in::where(keep, g, zeros({}, {g.dtype(), g.device()}))};
  });
}

// --- unary ---------------------------------------------------------------------------------------

Tensor neg(const Tensor& a) {
  Tensor out = in::neg(a);
  if (!any_requires_grad(a)) return out;
  return record("neg", out, {a}, [](const Tensor& g) { return Grads{in::neg(g)}; });
}

Tensor abs(const Tensor& a) {
  Tensor out = in::abs(a);
  if (!any_requires_grad(a)) return out;
  return record("abs", out, {a}, [a = a.detach()](const Tensor& g) {
    return Grads{in::mul(g, in::unary(UnaryOp::Sign, a))};
  });
}

Tensor sign(const Tensor& a) {
  Tensor out = in::unary(UnaryOp::Sign, a);
  if (!any_requires_grad(a)) return out;
  return record("sign", out, {a}, [](const Tensor& g) { return Grads{zeros_like(g)}; });
}

Tensor exp(const Tensor& a_in) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Exp, a_in);
  Tensor out = in::exp(a);
  if (!any_requires_grad(a)) return out;
  return record("exp", out, {a}, [out = out.detach()](const Tensor& g) { return Grads{in::mul(g, out)}; },
                kSavesOutput);
}

Tensor log(const Tensor& a_in) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Exp, a_in);
  Tensor out = in::log(a);
  if (!any_requires_grad(a)) return out;
  return record("log", out, {a}, [a = a.detach()](const Tensor& g) { return Grads{in::div(g, a)}; });
}

Tensor sqrt(const Tensor& a) {
  Tensor out = in::sqrt(a);
  if (!any_requires_grad(a)) return out;
  return record("sqrt", out, {a}, [out = out.detach()](const Tensor& g) {
    return Grads{in::div(in::mul(g, 0.5), out)};
  }, kSavesOutput);
}

Tensor rsqrt(const Tensor& a_in) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Exp, a_in);
  Tensor out = in::unary(UnaryOp::Rsqrt, a);
  if (!any_requires_grad(a)) return out;
  return record("rsqrt", out, {a}, [out = out.detach()](const Tensor& g) {  // -0.5 a^(-3/2)
    return Grads{in::mul(in::mul(g, in::mul(out, in::mul(out, out))), -0.5)};
  }, kSavesOutput);
}

Tensor square(const Tensor& a) { return mul(a, a); }

Tensor sin(const Tensor& a) {
  Tensor out = in::unary(UnaryOp::Sin, a);
  if (!any_requires_grad(a)) return out;
  return record("sin", out, {a}, [a = a.detach()](const Tensor& g) {
    return Grads{in::mul(g, in::unary(UnaryOp::Cos, a))};
  });
}

Tensor cos(const Tensor& a) {
  Tensor out = in::unary(UnaryOp::Cos, a);
  if (!any_requires_grad(a)) return out;
  return record("cos", out, {a}, [a = a.detach()](const Tensor& g) {
    return Grads{in::neg(in::mul(g, in::unary(UnaryOp::Sin, a)))};
  });
}

Tensor tanh(const Tensor& a) { return unary_with(UnaryOp::Tanh, a, BinaryOp::TanhBackward, true); }
Tensor sigmoid(const Tensor& a) { return unary_with(UnaryOp::Sigmoid, a, BinaryOp::SigmoidBackward, true); }
// The output is positive exactly where the input is, so only the output is kept.
Tensor relu(const Tensor& a) { return unary_with(UnaryOp::Relu, a, BinaryOp::ReluBackward, true); }
Tensor silu(const Tensor& a) { return unary_with(UnaryOp::Silu, a, BinaryOp::SiluBackward, false); }

Tensor gelu(const Tensor& a, const std::string& approximate) {
  LOCKSTEP_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
                 approximate, "\"");
  return approximate == "tanh" ? unary_with(UnaryOp::GeluTanh, a, BinaryOp::GeluTanhBackward, false)
                               : unary_with(UnaryOp::Gelu, a, BinaryOp::GeluBackward, false);
}

// --- selection -----------------------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = in::where(cond, a, b);
  if (!any_requires_grad(a, b)) return out;
  return record("where", out, {a, b},
                [cond, sa = a.shape(), sb = b.shape(), da = a.dtype(), db = b.dtype()](const Tensor& g) {
                  Tensor zero = zeros({}, {g.dtype(), g.device()});
                  return Grads{reduce_grad(in::where(cond, g, zero), sa, da),
                               reduce_grad(in::where(cond, zero, g), sb, db)};
                });
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  LOCKSTEP_CHECK(a.defined(), "where: got an undefined tensor");
  return where(cond, a, full({}, b, {a.dtype(), a.device()}));
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  LOCKSTEP_CHECK(a.defined() && mask.defined(), "masked_fill: got an undefined tensor");
  LOCKSTEP_CHECK(mask.dtype() == kBool, "masked_fill: expected a bool mask, got ", mask.dtype());
  LOCKSTEP_CHECK(a.device() == mask.device(), "masked_fill: input on ", a.device(), " but mask on ", mask.device());
  LOCKSTEP_CHECK(in::broadcast_shapes(a.shape(), mask.shape(), "masked_fill") == a.shape(), "masked_fill: mask ",
                 mask.shape(), " does not broadcast to ", a.shape());
  return where(mask, full({}, value, {a.dtype(), a.device()}), a);
}

// tril/triu keep the elements on the chosen side of a diagonal of the last two dimensions.
static Tensor triangle(const Tensor& a, int64_t diagonal, bool lower) {
  LOCKSTEP_CHECK(a.defined() && a.dim() >= 2, lower ? "tril" : "triu", ": expected at least 2 dimensions, got ",
                 a.defined() ? a.shape() : Shape{});
  const int64_t r = a.size(-2), c = a.size(-1);
  TensorOptions io(kInt64, a.device());
  // col - row, [r, c]
  Tensor offset = in::sub(in::unsqueeze(arange(c, io), 0), in::unsqueeze(arange(r, io), 1));
  Tensor keep = in::binary_scalar(lower ? BinaryOp::Le : BinaryOp::Ge, offset, static_cast<double>(diagonal));
  return where(keep, a, 0.0);
}
Tensor tril(const Tensor& a, int64_t diagonal) { return triangle(a, diagonal, true); }
Tensor triu(const Tensor& a, int64_t diagonal) { return triangle(a, diagonal, false); }

// --- comparisons and logic (not differentiable) ----------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(BinaryOp::Ge, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare(BinaryOp::LogicalAnd, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare(BinaryOp::LogicalOr, a, b); }
Tensor logical_not(const Tensor& a) { return in::unary(UnaryOp::LogicalNot, a); }

// --- operators -------------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator+(double s, const Tensor& a) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }
Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double s) { return in::binary_scalar(BinaryOp::Eq, a, s); }
Tensor operator!=(const Tensor& a, double s) { return in::binary_scalar(BinaryOp::Ne, a, s); }
Tensor operator<(const Tensor& a, double s) { return in::binary_scalar(BinaryOp::Lt, a, s); }
Tensor operator<=(const Tensor& a, double s) { return in::binary_scalar(BinaryOp::Le, a, s); }
Tensor operator>(const Tensor& a, double s) { return in::binary_scalar(BinaryOp::Gt, a, s); }
Tensor operator>=(const Tensor& a, double s) { return in::binary_scalar(BinaryOp::Ge, a, s); }
Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
Tensor operator~(const Tensor& a) { return logical_not(a); }

}  // namespace lockstep
