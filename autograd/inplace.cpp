// In-place methods (add_, sub_, mul_, div_, clamp_, fill_, zero_, copy_, masked_fill_) and the compound
// assignments (+=, -=, *=, /=). Each computes its result with the graph-free ops, writes it through any
// layout (views included) and bumps the storage's version. None is recorded by autograd: a tensor that
// requires grad, or an operand that does, is refused while grad mode is on (PyTorch refuses the first
// for leaves; lockstep also for non-leaves, whose history it does not rebase). The version lets backward
// refuse an op whose input or output was changed in place after the op was recorded (engine.cpp).
#include "autograd/grad_mode.h"
#include "autograd/functions.h"
#include "common/check.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep {

namespace in = internal;

namespace {

void check_in_place(const Tensor& t, const char* op, const Tensor* operand = nullptr) {
  LOCKSTEP_CHECK(t.defined(), op, ": the tensor is undefined");
  if (!GradMode::is_enabled()) return;
  LOCKSTEP_CHECK(!t.requires_grad(), op, ": cannot modify ", t.is_leaf() ? "a leaf tensor" : "a tensor with a grad_fn",
                 " ", t.shape(), " that requires grad in place while grad mode is on (a manual update goes in a "
                 "NoGradGuard block, as torch.no_grad(); else use the out-of-place op)");
  LOCKSTEP_CHECK(operand == nullptr || !operand->defined() || !operand->requires_grad(), op, ": the operand ",
                 operand->shape(), " requires grad, and an in-place op is not recorded; use the out-of-place op "
                 "(x = x + y) or detach() the operand");
}

// Writes `result` (the op's value on t's shape: binary_ has checked that the operand broadcasts to t)
// into t, checking PyTorch's cast rule: the result's dtype must be castable to t's.
const Tensor& write(const Tensor& t, const Tensor& result, const char* op) {
  LOCKSTEP_CHECK((t.is_floating_point() || !is_floating_point(result.dtype())) &&
                     (t.dtype() != kBool || result.dtype() == kBool),
                 op, ": result type ", result.dtype(), " can't be cast to the tensor's dtype ", t.dtype());
  Tensor dst = t;  // a handle on the same storage
  in::copy_(dst, result);
  t.storage()->bump_version();
  return t;
}

const Tensor& binary_(const Tensor& t, BinaryOp bop, const Tensor& other, const char* op) {
  check_in_place(t, op, &other);
  LOCKSTEP_CHECK(other.defined(), op, ": the operand is undefined");
  bool fits = other.dim() <= t.dim();  // numpy broadcasting of the operand to t's shape
  for (int64_t d = 0; fits && d < other.dim(); ++d) {
    const int64_t have = other.size(d), want = t.size(d + t.dim() - other.dim());
    fits = have == want || have == 1;
  }
  LOCKSTEP_CHECK(fits, op, ": the operand ", other.shape(), " does not broadcast to the tensor's shape ", t.shape());
  return write(t, in::binary(bop, t, other), op);
}

const Tensor& scalar_(const Tensor& t, BinaryOp bop, double s, const char* op) {
  check_in_place(t, op);
  LOCKSTEP_CHECK(t.is_floating_point() || s == static_cast<double>(static_cast<int64_t>(s)), op, ": result type ",
                 "float can't be cast to the tensor's dtype ", t.dtype(), " (the scalar is ", s, ")");
  return write(t, in::binary_scalar(bop, t, s), op);
}

}  // namespace

const Tensor& Tensor::add_(const Tensor& other, double alpha) const {
  return binary_(*this, BinaryOp::Add, alpha == 1.0 || !other.defined() ? other : in::mul(other, alpha), "add_");
}
const Tensor& Tensor::sub_(const Tensor& other, double alpha) const {
  return binary_(*this, BinaryOp::Sub, alpha == 1.0 || !other.defined() ? other : in::mul(other, alpha), "sub_");
}
const Tensor& Tensor::mul_(const Tensor& other) const { return binary_(*this, BinaryOp::Mul, other, "mul_"); }
const Tensor& Tensor::div_(const Tensor& other) const {
  LOCKSTEP_CHECK(is_floating_point(), "div_: true division of a ", dtype(), " tensor gives floats, which can't be "
                 "written back into it");
  return binary_(*this, BinaryOp::Div, other, "div_");
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
  check_in_place(*this, "clamp_");
  NoGradGuard no_grad;
  return write(*this, lockstep::clamp(*this, min, max), "clamp_");
}

const Tensor& Tensor::fill_(double value) const {
  check_in_place(*this, "fill_");
  Tensor self = *this;
  in::fill_(self, value);
  storage()->bump_version();
  return *this;
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  check_in_place(*this, "copy_", &src);
  Tensor self = *this;
  in::copy_(self, src);
  storage()->bump_version();
  return *this;
}

const Tensor& Tensor::masked_fill_(const Tensor& mask, double value) const {
  check_in_place(*this, "masked_fill_");
  Tensor self = *this;
  in::copy_(self, in::where(mask, full({}, value, {dtype(), device()}), *this));
  storage()->bump_version();
  return *this;
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
