// The elementwise core of the ops layer: loop plans, elementwise ops from the table in
// elementwise_ops.h (checks, dtype promotion), copies and conversions. bfloat16 and float16 tensors go to
// the kernels as they are (each element computed in float32 and rounded once, tensor/dtype.h's compute_t).
#include "tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "tensor/int_div.h"

namespace lockstep::internal {

namespace {

bool accepts(OpDtypes kinds, Dtype d) {
  switch (kinds) {
    case OpDtypes::kFloating: return is_floating_point(d);
    case OpDtypes::kNumeric: return d != kBool;
    case OpDtypes::kAll: return true;
  }
  return false;
}

void check_dtype(OpDtypes kinds, Dtype d, const char* op) {
  LOCKSTEP_CHECK(accepts(kinds, d), op, ": expected a ",
                 kinds == OpDtypes::kFloating ? "floating-point" : "numeric (non-bool)", " tensor, got ", dtype_name(d));
}

// Integer division by zero traps the CPU (SIGFPE); PyTorch raises instead, and so does lockstep. Checked
// here where the values are host-readable (Capability::kHostReadable): reading a GPU divisor back would
// cost a sync per op. The CUDA backend checks its divisors on the device instead
// (tensor/cuda/elementwise.cu, device_error.h): the division is skipped and this same message is raised
// at the next synchronization.
// `op`: div, fmod or remainder (div's message is also the one a GPU raises at its next synchronization).
std::string division_by_zero(const char* op) {
  if (std::string_view(op) == "div") return detail::kIntegerDivisionByZero;
  return detail::str_cat(op, ": integer division by zero (a divisor element is 0)");
}
void check_integer_divisor(const Tensor& divisor, const char* op) {
  if (is_floating_point(divisor.dtype()) || !supports(divisor.device(), Capability::kHostReadable, divisor.dtype()))
    return;
  for (int64_t v : divisor.to_vector<int64_t>()) LOCKSTEP_CHECK(v != 0, division_by_zero(op));
}

// A 16-bit operand beside a float32 one: a backend with Capability::kMixedWithFloat32 (the CPU) reads it
// as it is (the residual stream under autocast adds bfloat16 outputs into float32), so only the others
// and other pairs get a copy in the common dtype.
bool mixes_16bit_with_float32(const Tensor& a, const Tensor& b) {
  const Tensor& half = is_reduced_floating_point(a.dtype()) ? a : b;
  const Tensor& other = &half == &a ? b : a;
  return is_reduced_floating_point(half.dtype()) && other.dtype() == kFloat32 &&
         supports(half.device(), Capability::kMixedWithFloat32, half.dtype());
}

}  // namespace

void check_defined(const Tensor& t, const char* op) { LOCKSTEP_CHECK(t.defined(), op, ": got an undefined tensor"); }

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  LOCKSTEP_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.device(), " and ", b.device());
}

void check_floating(const Tensor& a, const char* op) {
  LOCKSTEP_CHECK(is_floating_point(a.dtype()), op, ": expected a floating-point tensor, got ", a.dtype());
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t d = dim < 0 ? dim + ndim : dim;
  LOCKSTEP_CHECK(d >= 0 && d < ndim, op, ": dimension ", dim, " out of range for a ", ndim, "-D tensor");
  return d;
}

void split_dim(const Shape& shape, int64_t dim, int64_t& outer, int64_t& n, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  n = shape[dim];
  for (size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t nd = std::max(a.size(), b.size());
  Shape out(nd);
  for (size_t k = 0; k < nd; ++k) {
    int64_t da = k < nd - a.size() ? 1 : a[k - (nd - a.size())];
    int64_t db = k < nd - b.size() ? 1 : b[k - (nd - b.size())];
    LOCKSTEP_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " cannot be broadcast (dimension ",
                   k, ": ", da, " vs ", db, ")");
    out[k] = da == 1 ? db : da;
  }
  return out;
}

// Each input's strides aligned to out's dimensions (0 where it is broadcast), then adjacent dimensions
// merged where every operand walks them as one, and size-1 dimensions dropped.
StridedPlan make_plan(const Tensor& out, std::initializer_list<const Tensor*> inputs, const char* op) {
  const int64_t nd = out.dim();
  const int nops = 1 + static_cast<int>(inputs.size());
  LOCKSTEP_CHECK(nops <= StridedPlan::kMaxOperands, op, ": too many operands");
  // Operand o's stride along the result's dimension d (0 where it broadcasts), computed in place: the
  // plan is made for every op, so it allocates nothing.
  const Tensor* operands[StridedPlan::kMaxOperands] = {&out};
  int k = 1;
  for (const Tensor* in : inputs) {
    const int64_t lead = nd - in->dim();
    LOCKSTEP_CHECK(lead >= 0, op, ": operand ", in->shape(), " has more dimensions than the result ", out.shape());
    for (int64_t d = 0; d < in->dim(); ++d) {
      const int64_t have = in->shape()[d], want = out.shape()[d + lead];
      LOCKSTEP_CHECK(have == want || have == 1, op, ": operand ", in->shape(), " does not broadcast to ", out.shape());
    }
    operands[k++] = in;
  }
  auto stride = [&](int o, int64_t d) -> int64_t {
    const Tensor& t = *operands[o];
    const int64_t i = d - (nd - t.dim());
    return i < 0 || t.shape()[i] == 1 ? 0 : t.strides()[i];
  };
  StridedPlan p;
  p.numel = out.numel();
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t size = out.shape()[d];
    if (size == 1) continue;
    if (p.nd > 0) {
      bool merge = true;
      for (int o = 0; o < nops; ++o) merge = merge && p.stride[o][p.nd - 1] == stride(o, d) * size;
      if (merge) {
        p.shape[p.nd - 1] *= size;
        for (int o = 0; o < nops; ++o) p.stride[o][p.nd - 1] = stride(o, d);
        continue;
      }
    }
    LOCKSTEP_CHECK(p.nd < StridedPlan::kMaxDims, op, ": ", out.shape(), " needs more than ", StridedPlan::kMaxDims,
                   " dimensions after merging; make an operand contiguous first");
    p.shape[p.nd] = size;
    for (int o = 0; o < nops; ++o) p.stride[o][p.nd] = stride(o, d);
    ++p.nd;
  }
  if (p.nd == 0) {  // a single element
    p.nd = 1;
    p.shape[0] = 1;
  }
  return p;
}

// --- elementwise -----------------------------------------------------------------------------------

Tensor unary(UnaryOp op, const Tensor& a, const OpScalars& params) {
  const char* name = op_name(op);
  check_defined(a, name);
  check_dtype(op_dtypes(op), a.dtype(), name);
  Tensor out(a.shape(), op_returns_bool(op) ? kBool : a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).unary(op, make_plan(out, {&a}, name), out, a, params);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in, const OpScalars& params) {
  const char* name = op_name(op);
  check_defined(a_in, name);
  check_defined(b_in, name);
  check_same_device(a_in, b_in, name);
  const Dtype common = promote_types(a_in.dtype(), b_in.dtype());
  check_dtype(op_dtypes(op), common, name);
  const bool mixed = mixes_16bit_with_float32(a_in, b_in);
  Tensor a = mixed ? a_in : to_dtype(a_in, common), b = mixed ? b_in : to_dtype(b_in, common);
  Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  if (divides_integers(op)) check_integer_divisor(b, name);
  Tensor out(out_shape, op_returns_bool(op) ? kBool : common, a.device());
  if (out.numel()) backend_for(a.device()).binary(op, make_plan(out, {&a, &b}, name), out, a, b, params);
  return out;
}

Tensor binary_scalar(BinaryOp op, const Tensor& a_in, double s, bool reverse, const OpScalars& params) {
  const char* name = op_name(op);
  check_defined(a_in, name);
  // An integer tensor with a fractional scalar computes in float32, as PyTorch's default dtype.
  const Tensor a = !is_floating_point(a_in.dtype()) && s != std::floor(s) ? to_dtype(a_in, kFloat32) : a_in;
  check_dtype(op_dtypes(op), a.dtype(), name);
  if (divides_integers(op) && !is_floating_point(a.dtype())) {
    if (reverse) check_integer_divisor(a, name);
    else LOCKSTEP_CHECK(static_cast<int64_t>(s) != 0, division_by_zero(name));
  }
  Tensor out(a.shape(), op_returns_bool(op) ? kBool : a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).binary_scalar(op, make_plan(out, {&a}, name), out, a, s, reverse, params);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  check_defined(cond, "where");
  check_defined(a_in, "where");
  check_defined(b_in, "where");
  LOCKSTEP_CHECK(cond.dtype() == kBool, "where: expected a bool condition, got ", cond.dtype());
  check_same_device(cond, a_in, "where");
  check_same_device(a_in, b_in, "where");
  const Dtype common = promote_types(a_in.dtype(), b_in.dtype());
  Tensor a = to_dtype(a_in, common), b = to_dtype(b_in, common);
  Shape shape = broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), "where"), "where");
  Tensor out(shape, common, a.device());
  if (out.numel()) backend_for(a.device()).where(make_plan(out, {&cond, &a, &b}, "where"), out, cond, a, b);
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Maximum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Eq, a, b); }
Tensor add(const Tensor& a, double s) { return binary_scalar(BinaryOp::Add, a, s); }
Tensor mul(const Tensor& a, double s) { return binary_scalar(BinaryOp::Mul, a, s); }
Tensor neg(const Tensor& a) { return unary(UnaryOp::Neg, a); }
Tensor exp(const Tensor& a) { return unary(UnaryOp::Exp, a); }
Tensor log(const Tensor& a) { return unary(UnaryOp::Log, a); }
Tensor relu(const Tensor& a) { return unary(UnaryOp::Relu, a); }
Tensor sqrt(const Tensor& a) { return unary(UnaryOp::Sqrt, a); }
Tensor abs(const Tensor& a) { return unary(UnaryOp::Abs, a); }

// --- copies and conversion ---------------------------------------------------------------------------

void copy_(Tensor& dst, const Tensor& src) {
  check_defined(dst, "copy_");
  check_defined(src, "copy_");
  bool fits = src.dim() <= dst.dim();
  for (int64_t d = 0; fits && d < src.dim(); ++d) {
    const int64_t have = src.shape()[d], want = dst.shape()[d + dst.dim() - src.dim()];
    fits = have == want || have == 1;
  }
  LOCKSTEP_CHECK(fits, "copy_: source ", src.shape(), " does not broadcast to destination ", dst.shape());
  if (!dst.numel()) return;
  if (dst.device() == src.device()) {
    backend_for(dst.device()).copy_(make_plan(dst, {&src}, "copy_"), dst, src);
    return;
  }
  // Between devices the bytes move contiguously, in the source's dtype; layout, broadcast and
  // conversion are then done on the destination's device.
  Tensor s = contiguous(src);
  const bool direct = dst.is_contiguous() && dst.dtype() == s.dtype() && dst.shape() == s.shape();
  Tensor staged = direct ? dst : Tensor(s.shape(), s.dtype(), dst.device());
  Device d = dst.device().is_cuda() ? dst.device() : src.device();  // its backend reaches the host
  backend_for(d).copy(staged, s);
  if (!direct) copy_(dst, staged);
}

void fill_(Tensor& t, double value) {
  check_defined(t, "fill_");
  if (t.numel()) backend_for(t.device()).fill(make_plan(t, {}, "fill_"), t, value);
}

void add_(Tensor& a, const Tensor& b_in, double alpha) {
  check_defined(a, "add_");
  check_defined(b_in, "add_");
  check_same_device(a, b_in, "add_");
  LOCKSTEP_CHECK(b_in.dim() <= a.dim() && broadcast_shapes(a.shape(), b_in.shape(), "add_") == a.shape(),
                 "add_: cannot add ", b_in.shape(), " into ", a.shape(), " in place");
  if (!a.numel()) return;
  Tensor b = alpha == 1.0 ? b_in : mul(b_in, alpha);
  if (b.dtype() != a.dtype() && !mixes_16bit_with_float32(a, b)) {
    copy_(a, add(a, b));
    return;
  }
  backend_for(a.device()).binary(BinaryOp::Add, make_plan(a, {&a, &b}, "add_"), a, a, b);
}

void mul_(Tensor& a, double s) {
  check_defined(a, "mul_");
  if (!a.numel()) return;
  backend_for(a.device()).binary_scalar(BinaryOp::Mul, make_plan(a, {&a}, "mul_"), a, a, s, false);
}

Tensor to_dtype(const Tensor& a, Dtype dtype) {
  check_defined(a, "to");
  if (a.dtype() == dtype) return a;
  Tensor out(a.shape(), dtype, a.device());
  copy_(out, a);
  return out;
}

Tensor to_device(const Tensor& a, Device device) {
  check_defined(a, "to");
  if (a.device() == device) return a;
  Tensor out(a.shape(), a.dtype(), device);
  copy_(out, a);
  return out;
}

Tensor clone(const Tensor& a) {
  check_defined(a, "clone");
  Tensor out(a.shape(), a.dtype(), a.device());
  copy_(out, a);
  return out;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return false;
    if (!std::isnan(x[i]) && std::abs(x[i] - y[i]) > atol + rtol * std::abs(y[i])) return false;
  }
  return true;
}

}  // namespace lockstep::internal
