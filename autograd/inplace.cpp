// In-place methods (add_, sub_, mul_, div_, clamp_, fill_, zero_, copy_, masked_fill_) and the compound
// assignments (+=, -=, *=, /=). Each computes its result with the graph-free ops, writes it through any
// layout (views included) and bumps the storage's version. In grad mode, when the tensor or the operand
// requires grad, the op is recorded as PyTorch does: a node taking the tensor's old history and the
// operand becomes the tensor's grad_fn (autograd::rebase_history), so torchvision's `out += identity`
// trains. Refused, as PyTorch: a leaf that requires grad. Refused where PyTorch would rewrite other
// tensors' histories (its CopySlices): a view of a tensor that requires grad, and a tensor sharing its
// storage that takes a gradient only from the operand. A node that kept a tensor changed in place
// afterwards refuses to run in backward (the version check in engine.cpp).
#include "autograd/autograd_util.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "common/check.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep {

namespace in = internal;
using autograd::Grads;
using autograd::reduce_grad;

namespace {

// Whether the op on t (and `operand`) must be recorded; refuses what can't be.
bool check_in_place(const Tensor& t, const char* op, const Tensor* operand = nullptr) {
  LOCKSTEP_CHECK(t.defined(), op, ": the tensor is undefined");
  const bool operand_grad = operand && operand->defined() && operand->requires_grad();
  if (!GradMode::is_enabled() || (!t.requires_grad() && !operand_grad)) return false;
  LOCKSTEP_CHECK(!t.requires_grad() || t.grad_fn(), op, ": a leaf tensor ", t.shape(), " that requires grad can't "
                 "be modified in place while grad mode is on (a manual update goes in a NoGradGuard block, as "
                 "torch.no_grad(); else use the out-of-place op)");
  LOCKSTEP_CHECK(!t.requires_grad() || !t.grad_fn()->is_view, op, ": can't modify in place the view ", t.shape(),
                 " (made by ", t.grad_fn()->name(), ") of a tensor that requires grad: the tensor it views would "
                 "not see the op in its history; use the out-of-place op");
  LOCKSTEP_CHECK(t.requires_grad() || t.storage().use_count() == 1, op, ": the tensor ", t.shape(), " shares its "
                 "storage with another tensor (a view, or a copy an op kept for backward) that would not see the "
                 "gradient of the operand ", operand->shape(), "; clone() it first or use the out-of-place op");
  return true;
}

// Writes `result` (the op's value on t's shape: binary_ has checked that the operand broadcasts to t)
// into t, checking PyTorch's cast rule: the result's dtype must be castable to t's. With `backward`,
// the op becomes t's history, its inputs being t as it was and `operands`.
const Tensor& write(const Tensor& t, const Tensor& result, const char* op, autograd::BackwardFn backward = nullptr,
                    const std::vector<Tensor>& operands = {}) {
  LOCKSTEP_CHECK((t.is_floating_point() || !is_floating_point(result.dtype())) &&
                     (t.dtype() != kBool || result.dtype() == kBool),
                 op, ": result type ", result.dtype(), " can't be cast to the tensor's dtype ", t.dtype());
  Tensor dst = t;  // a handle on the same storage
  in::copy_(dst, result);
  t.storage()->bump_version();
  if (backward) {
    std::vector<Tensor> inputs{t};
    inputs.insert(inputs.end(), operands.begin(), operands.end());
    autograd::rebase_history(t, std::make_shared<autograd::FunctionNode>(op, std::move(backward)), inputs);
  }
  return t;
}

// What the backward of an in-place op may keep of a tensor: a handle, or a copy when the op is about
// to overwrite its storage (t *= t).
Tensor kept(const Tensor& x, const Tensor& t) { return x.storage() == t.storage() ? in::clone(x) : x.detach(); }

// The backward of t op= alpha * other: gradients for t's old value and for `other` (r: the result).
autograd::BackwardFn binary_backward(BinaryOp bop, const Tensor& t, const Tensor& other, double alpha, const Tensor& r) {
  const Shape ts = t.shape(), os = other.shape();
  const Dtype td = t.dtype(), od = other.dtype();
  const bool want_t = t.requires_grad(), want_o = other.requires_grad();
  switch (bop) {
    case BinaryOp::Add:
    case BinaryOp::Sub: {
      const double scale = bop == BinaryOp::Add ? alpha : -alpha;
      return [=](const Tensor& g) { return Grads{g, want_o ? reduce_grad(in::mul(g, scale), os, od) : Tensor()}; };
    }
    case BinaryOp::Mul: {  // d/dt = other; d/dother = t's old value, copied before the write
      Tensor o = kept(other, t), t0 = want_o ? in::clone(t) : Tensor();
      return [=](const Tensor& g) {
        return Grads{want_t ? reduce_grad(in::mul(g, o), ts, td) : Tensor(),
                     want_o ? reduce_grad(in::mul(g, t0), os, od) : Tensor()};
      };
    }
    case BinaryOp::Div: {  // d/dt = 1 / other; d/dother = -(t / other) / other = -r / other
      Tensor o = kept(other, t);
      return [=](const Tensor& g) {
        return Grads{want_t ? reduce_grad(in::div(g, o), ts, td) : Tensor(),
                     want_o ? reduce_grad(in::neg(in::div(in::mul(g, r), o)), os, od) : Tensor()};
      };
    }
    default: fail("in-place ", op_name(bop), ": no backward");
  }
}

const Tensor& binary_(const Tensor& t, BinaryOp bop, const Tensor& other, double alpha, const char* op) {
  const bool recorded = check_in_place(t, op, &other);
  LOCKSTEP_CHECK(other.defined(), op, ": the operand is undefined");
  bool fits = other.dim() <= t.dim();  // numpy broadcasting of the operand to t's shape
  for (int64_t d = 0; fits && d < other.dim(); ++d) {
    const int64_t have = other.size(d), want = t.size(d + t.dim() - other.dim());
    fits = have == want || have == 1;
  }
  LOCKSTEP_CHECK(fits, op, ": the operand ", other.shape(), " does not broadcast to the tensor's shape ", t.shape());
  Tensor r = in::binary(bop, t, alpha == 1.0 ? other : in::mul(other, alpha));
  if (!recorded) return write(t, r, op);
  return write(t, r, op, binary_backward(bop, t, other, alpha, r), {other});
}

const Tensor& scalar_(const Tensor& t, BinaryOp bop, double s, const char* op) {
  const bool recorded = check_in_place(t, op);
  LOCKSTEP_CHECK(t.is_floating_point() || s == static_cast<double>(static_cast<int64_t>(s)), op, ": result type ",
                 "float can't be cast to the tensor's dtype ", t.dtype(), " (the scalar is ", s, ")");
  Tensor r = in::binary_scalar(bop, t, s);
  if (!recorded) return write(t, r, op);
  // d/dt of t + s, t - s is 1; of t * s, s; of t / s, 1 / s.
  const double slope = bop == BinaryOp::Mul ? s : bop == BinaryOp::Div ? 1.0 / s : 1.0;
  return write(t, r, op, [slope](const Tensor& g) { return Grads{slope == 1.0 ? g : in::mul(g, slope)}; });
}

}  // namespace

const Tensor& Tensor::add_(const Tensor& other, double alpha) const {
  return binary_(*this, BinaryOp::Add, other, alpha, "add_");
}
const Tensor& Tensor::sub_(const Tensor& other, double alpha) const {
  return binary_(*this, BinaryOp::Sub, other, alpha, "sub_");
}
const Tensor& Tensor::mul_(const Tensor& other) const { return binary_(*this, BinaryOp::Mul, other, 1.0, "mul_"); }
const Tensor& Tensor::div_(const Tensor& other) const {
  LOCKSTEP_CHECK(is_floating_point(), "div_: true division of a ", dtype(), " tensor gives floats, which can't be "
                 "written back into it");
  return binary_(*this, BinaryOp::Div, other, 1.0, "div_");
}
const Tensor& Tensor::add_(double other) const { return scalar_(*this, BinaryOp::Add, other, "add_"); }
const Tensor& Tensor::sub_(double other) const { return scalar_(*this, BinaryOp::Sub, other, "sub_"); }
const Tensor& Tensor::mul_(double other) const { return scalar_(*this, BinaryOp::Mul, other, "mul_"); }
const Tensor& Tensor::div_(double other) const {
  LOCKSTEP_CHECK(is_floating_point(), "div_: true division of a ", dtype(), " tensor gives floats, which can't be "
                 "written back into it");
  return scalar_(*this, BinaryOp::Div, other, "div_");
}

const Tensor& Tensor::clamp_(std::optional<double> min, std::optional<double> max) const {
  const bool recorded = check_in_place(*this, "clamp_");
  Tensor r;
  {
    NoGradGuard no_grad;
    r = lockstep::clamp(*this, min, max);
  }
  if (!recorded) return write(*this, r, "clamp_");
  // The gradient passes where min <= t <= max, as clamp's; the mask is taken before the write.
  Tensor keep;
  if (min) keep = in::binary_scalar(BinaryOp::Ge, *this, *min);
  if (max) {
    Tensor below = in::binary_scalar(BinaryOp::Le, *this, *max);
    keep = keep.defined() ? in::binary(BinaryOp::LogicalAnd, keep, below) : below;
  }
  return write(*this, r, "clamp_", [keep](const Tensor& g) {
    return Grads{in::where(keep, g, zeros({}, {g.dtype(), g.device()}))};
  });
}

const Tensor& Tensor::fill_(double value) const {
  const bool recorded = check_in_place(*this, "fill_");
  Tensor self = *this;
  in::fill_(self, value);
  storage()->bump_version();
  // Every element is replaced: no gradient reaches the old history.
  if (recorded) autograd::rebase_history(*this, std::make_shared<autograd::FunctionNode>("fill_", [](const Tensor&) {
    return Grads{Tensor()};
  }), {*this});
  return *this;
}

// Draws replace every element, as fill_: the old history gets no gradient (copy_'s rule).
const Tensor& Tensor::uniform_(double from, double to) const {
  LOCKSTEP_CHECK(from <= to, "uniform_: expects from <= to, got from=", from, " to=", to);
  return copy_(uniform(shape(), from, to, {dtype(), device()}));
}
const Tensor& Tensor::normal_(double mean, double std) const {
  LOCKSTEP_CHECK(std >= 0, "normal_: expects std >= 0.0, but found std ", std);
  return copy_(normal(mean, std, shape(), {dtype(), device()}));
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  const bool recorded = check_in_place(*this, "copy_", &src);
  LOCKSTEP_CHECK(src.defined(), "copy_: the source is undefined");
  Tensor source = recorded && src.storage() == storage() ? in::clone(src) : src;
  Tensor self = *this;
  in::copy_(self, source);
  storage()->bump_version();
  if (recorded) {
    const bool want = src.requires_grad();
    const Shape s = src.shape();
    const Dtype d = src.dtype();
    const Device dev = src.device();
    autograd::rebase_history(*this, std::make_shared<autograd::FunctionNode>("copy_", [=](const Tensor& g) {
      return Grads{Tensor(), want ? reduce_grad(in::to_device(g, dev), s, d) : Tensor()};
    }), {*this, src});
  }
  return *this;
}

const Tensor& Tensor::masked_fill_(const Tensor& mask, double value) const {
  const bool recorded = check_in_place(*this, "masked_fill_");
  Tensor r = in::where(mask, full({}, value, {dtype(), device()}), *this);
  if (!recorded) return write(*this, r, "masked_fill_");
  return write(*this, r, "masked_fill_", [mask = in::clone(mask)](const Tensor& g) {
    return Grads{in::where(mask, zeros({}, {g.dtype(), g.device()}), g)};
  });
}

const Tensor& operator+=(const Tensor& a, const Tensor& b) { return a.add_(b); }
const Tensor& operator-=(const Tensor& a, const Tensor& b) { return a.sub_(b); }
const Tensor& operator*=(const Tensor& a, const Tensor& b) { return a.mul_(b); }
const Tensor& operator/=(const Tensor& a, const Tensor& b) { return a.div_(b); }
const Tensor& operator+=(const Tensor& a, double s) { return a.add_(s); }
const Tensor& operator-=(const Tensor& a, double s) { return a.sub_(s); }
const Tensor& operator*=(const Tensor& a, double s) { return a.mul_(s); }
const Tensor& operator/=(const Tensor& a, double s) { return a.div_(s); }

}  // namespace lockstep
