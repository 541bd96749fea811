// Raw tensor operations: argument checks, result allocation, dispatch to the device's kernels.
#include "tensor/ops.h"

#include <algorithm>
#include <cmath>

#include "tensor/factory.h"
#include "tensor/int_div.h"

namespace lockstep::ops {

namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::ReluBackward: return "relu_backward";
    case BinaryOp::Maximum: return "maximum";
  }
  return "binary";
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Abs: return "abs";
  }
  return "unary";
}

void check_defined(const Tensor& t, const char* op) {
  LOCKSTEP_CHECK(t.defined(), op, ": got an undefined tensor");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  LOCKSTEP_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.device(), " and ", b.device());
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  LOCKSTEP_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", a.dtype(), " and ", b.dtype(),
                 " (convert one with .to(dtype))");
}

void check_floating(const Tensor& a, const char* op) {
  LOCKSTEP_CHECK(is_floating_point(a.dtype()), op, ": expected a floating-point tensor, got ", a.dtype());
}

// Integer division by zero traps the CPU (SIGFPE); PyTorch raises instead, and so does lockstep. Checked
// here for host tensors only: reading a GPU divisor back would cost a sync per op. The CUDA backend
// checks its divisors on the device instead (tensor/cuda/elementwise.cu, device_error.h): the division
// is skipped and this same message is raised at the next synchronization.
void check_integer_divisor(const Tensor& divisor) {
  if (divisor.dtype() != kInt64 || !divisor.device().is_cpu()) return;
  const int64_t* p = divisor.data<int64_t>();
  for (int64_t i = 0; i < divisor.numel(); ++i) {
    LOCKSTEP_CHECK(p[i] != 0, detail::kIntegerDivisionByZero);
  }
}

// Merges adjacent dimensions that both inputs traverse contiguously (or both broadcast), so the
// kernels see as few dimensions as possible: a same-shape op becomes one flat loop.
BroadcastPlan make_plan(const Shape& out, const Shape& a, const Shape& b) {
  const size_t nd = out.size();
  std::vector<int64_t> sa(nd), sb(nd);
  int64_t ca = 1, cb = 1;
  for (size_t k = nd; k-- > 0;) {
    size_t ia = k + a.size() - nd, ib = k + b.size() - nd;
    bool has_a = k + a.size() >= nd, has_b = k + b.size() >= nd;
    int64_t da = has_a ? a[ia] : 1, db = has_b ? b[ib] : 1;
    sa[k] = da == 1 ? 0 : ca;
    sb[k] = db == 1 ? 0 : cb;
    ca *= da;
    cb *= db;
  }
  BroadcastPlan p;
  for (size_t k = 0; k < nd; ++k) {
    if (out[k] == 1) continue;  // size-1 dimensions contribute nothing
    if (!p.shape.empty() && p.stride_a.back() == sa[k] * out[k] && p.stride_b.back() == sb[k] * out[k]) {
      p.shape.back() *= out[k];
      p.stride_a.back() = sa[k];
      p.stride_b.back() = sb[k];
      continue;
    }
    p.shape.push_back(out[k]);
    p.stride_a.push_back(sa[k]);
    p.stride_b.push_back(sb[k]);
  }
  if (p.shape.empty()) {  // every dimension is 1: a single element
    p.shape = {1};
    p.stride_a = {0};
    p.stride_b = {0};
  }
  p.numel = 1;
  for (int64_t s : out) p.numel *= s;
  return p;
}

}  // namespace

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

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  check_defined(a, name);
  check_defined(b, name);
  check_same_device(a, b, name);
  check_same_dtype(a, b, name);
  Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  if (op == BinaryOp::Div) check_integer_divisor(b);
  Tensor out(out_shape, op == BinaryOp::Eq ? kInt64 : a.dtype(), a.device());
  if (out.numel() == 0) return out;
  BroadcastPlan plan = make_plan(out_shape, a.shape(), b.shape());
  backend_for(a.device()).binary(op, out, a, b, plan);
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Maximum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Eq, a, b); }

Tensor relu_backward(const Tensor& grad, const Tensor& input) {
  LOCKSTEP_CHECK(grad.defined() && input.defined() && grad.shape() == input.shape(), "relu_backward: gradient ",
                 grad.defined() ? grad.shape() : Shape{}, " does not match input ",
                 input.defined() ? input.shape() : Shape{});
  return binary(BinaryOp::ReluBackward, grad, input);
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool reverse) {
  const char* name = binary_name(op);
  check_defined(a, name);
  if (op == BinaryOp::Div && a.dtype() == kInt64) {
    if (reverse) check_integer_divisor(a);
    else LOCKSTEP_CHECK(static_cast<int64_t>(s) != 0, detail::kIntegerDivisionByZero);
  }
  Tensor out(a.shape(), op == BinaryOp::Eq ? kInt64 : a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).binary_scalar(op, out, a, s, reverse);
  return out;
}

Tensor add(const Tensor& a, double s) { return binary_scalar(BinaryOp::Add, a, s); }
Tensor mul(const Tensor& a, double s) { return binary_scalar(BinaryOp::Mul, a, s); }

Tensor unary(UnaryOp op, const Tensor& a) {
  const char* name = unary_name(op);
  check_defined(a, name);
  if (op == UnaryOp::Exp || op == UnaryOp::Log || op == UnaryOp::Sqrt) check_floating(a, name);
  Tensor out(a.shape(), a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).unary(op, out, a);
  return out;
}

Tensor neg(const Tensor& a) { return unary(UnaryOp::Neg, a); }
Tensor exp(const Tensor& a) { return unary(UnaryOp::Exp, a); }
Tensor log(const Tensor& a) { return unary(UnaryOp::Log, a); }
Tensor relu(const Tensor& a) { return unary(UnaryOp::Relu, a); }
Tensor sqrt(const Tensor& a) { return unary(UnaryOp::Sqrt, a); }
Tensor abs(const Tensor& a) { return unary(UnaryOp::Abs, a); }

// --- matrix products -----------------------------------------------------------------------------

static void check_gemm(const Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  LOCKSTEP_CHECK(a.dim() == 2 && b.dim() == 2, op, ": expected 2-D tensors, got ", a.shape(), " x ", b.shape());
  check_same_device(a, b, op);
  check_same_dtype(a, b, op);
  check_floating(a, op);
  int64_t k1 = ta ? a.size(0) : a.size(1), k2 = tb ? b.size(1) : b.size(0);
  LOCKSTEP_CHECK(k1 == k2, op, ": ", a.shape(), ta ? "^T" : "", " x ", b.shape(), tb ? "^T" : "",
                 ": inner dimensions differ");
  if (out.defined()) {
    Shape want{ta ? a.size(1) : a.size(0), tb ? b.size(0) : b.size(1)};
    LOCKSTEP_CHECK(out.shape() == want && out.dtype() == a.dtype() && out.device() == a.device(), op, ": output ",
                   out.shape(), " ", out.dtype(), " on ", out.device(), " does not match the product ", want, " ",
                   a.dtype(), " on ", a.device());
  }
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  check_gemm(Tensor(), a, ta, b, tb, "matmul");
  Tensor out({ta ? a.size(1) : a.size(0), tb ? b.size(0) : b.size(1)}, a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).gemm(out, a, ta, b, tb, 1.0, 0.0);
  return out;
}

void gemm_(Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, double alpha, double beta) {
  check_gemm(out, a, ta, b, tb, "gemm_");
  if (out.numel()) backend_for(a.device()).gemm(out, a, ta, b, tb, alpha, beta);
}

Tensor transpose(const Tensor& a) {
  check_defined(a, "transpose");
  LOCKSTEP_CHECK(a.dim() == 2, "transpose: expected a 2-D tensor, got ", a.shape());
  Tensor out({a.size(1), a.size(0)}, a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).transpose2d(out, a);
  return out;
}

// --- reductions ----------------------------------------------------------------------------------

static Tensor reduce_all(ReduceOp op, const Tensor& a, const char* name) {
  check_defined(a, name);
  if (op == ReduceOp::Mean) check_floating(a, name);
  Tensor out(Shape{}, a.dtype(), a.device());
  if (a.numel() == 0) {
    fill_(out, op == ReduceOp::Mean ? NAN : 0.0);  // as PyTorch: the sum of nothing is 0, the mean NaN
    return out;
  }
  backend_for(a.device()).reduce(op, out, a, 1, a.numel(), 1);
  return out;
}

static Tensor reduce_dim(ReduceOp op, const Tensor& a, int64_t dim, bool keepdim, const char* name) {
  check_defined(a, name);
  if (op == ReduceOp::Mean) check_floating(a, name);
  int64_t d = wrap_dim(dim, a.dim(), name);
  int64_t outer, n, inner;
  split_dim(a.shape(), d, outer, n, inner);
  LOCKSTEP_CHECK(n > 0 || op == ReduceOp::Sum, name, ": cannot reduce an empty dimension ", dim, " of shape ",
                 a.shape());
  Shape s = a.shape();
  if (keepdim) s[d] = 1;
  else s.erase(s.begin() + d);
  Tensor out(s, op == ReduceOp::Argmax ? kInt64 : a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (n == 0) fill_(out, 0.0);
  else backend_for(a.device()).reduce(op, out, a, outer, n, inner);
  return out;
}

Tensor sum(const Tensor& a) { return reduce_all(ReduceOp::Sum, a, "sum"); }
Tensor mean(const Tensor& a) { return reduce_all(ReduceOp::Mean, a, "mean"); }
Tensor sum(const Tensor& a, int64_t dim, bool keepdim) { return reduce_dim(ReduceOp::Sum, a, dim, keepdim, "sum"); }
Tensor mean(const Tensor& a, int64_t dim, bool keepdim) { return reduce_dim(ReduceOp::Mean, a, dim, keepdim, "mean"); }
Tensor max(const Tensor& a, int64_t dim, bool keepdim) { return reduce_dim(ReduceOp::Max, a, dim, keepdim, "max"); }
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return reduce_dim(ReduceOp::Argmax, a, dim, keepdim, "argmax");
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  LOCKSTEP_CHECK(broadcast_shapes(a.shape(), shape, "sum_to") == a.shape(), "sum_to: cannot sum ", a.shape(),
                 " down to ", shape);
  Tensor r = a;
  // Leading dimensions that `shape` lacks: one flat reduction [lead, rest] -> [rest].
  size_t lead = a.dim() - shape.size();
  if (lead > 0) {
    int64_t outer = 1;
    for (size_t i = 0; i < lead; ++i) outer *= a.shape()[i];
    Shape rest(a.shape().begin() + lead, a.shape().end());
    r = reshape(sum(reshape(r, {outer, r.numel() / std::max<int64_t>(outer, 1)}), 0), rest);
  }
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 1 && r.shape()[i] != 1) r = sum(r, static_cast<int64_t>(i), true);
  return r;
}

// --- softmax and loss ----------------------------------------------------------------------------

Tensor log_softmax(const Tensor& a, int64_t dim) {
  check_defined(a, "log_softmax");
  check_floating(a, "log_softmax");
  int64_t d = wrap_dim(dim, a.dim(), "log_softmax"), outer, n, inner;
  split_dim(a.shape(), d, outer, n, inner);
  Tensor out(a.shape(), a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).log_softmax(out, a, outer, n, inner);
  return out;
}

Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& output, int64_t dim) {
  LOCKSTEP_CHECK(grad_out.shape() == output.shape(), "log_softmax_backward: gradient ", grad_out.shape(),
                 " does not match output ", output.shape());
  int64_t d = wrap_dim(dim, output.dim(), "log_softmax_backward"), outer, n, inner;
  split_dim(output.shape(), d, outer, n, inner);
  Tensor g(output.shape(), output.dtype(), output.device());
  if (g.numel()) backend_for(output.device()).log_softmax_backward(g, grad_out, output, outer, n, inner);
  return g;
}

static void check_nll(const Tensor& logp, const Tensor& target, const char* op) {
  check_defined(logp, op);
  check_defined(target, op);
  check_floating(logp, op);
  LOCKSTEP_CHECK(logp.dim() == 2, op, ": expected input [N, C], got ", logp.shape());
  LOCKSTEP_CHECK(target.dtype() == kInt64, op, ": expected int64 class targets, got ", target.dtype());
  LOCKSTEP_CHECK(target.dim() == 1 && target.size(0) == logp.size(0), op, ": target ", target.shape(),
                 " does not match input ", logp.shape(), " (expected [", logp.size(0), "])");
  check_same_device(logp, target, op);
}

Tensor nll_loss(const Tensor& logp, const Tensor& target, bool mean) {
  check_nll(logp, target, "nll_loss");
  Tensor out(Shape{}, logp.dtype(), logp.device());
  int64_t n = logp.size(0);
  if (n == 0) {
    fill_(out, mean ? NAN : 0.0);
    return out;
  }
  backend_for(logp.device()).nll_loss(out, logp, target, mean ? 1.0 / n : 1.0);
  return out;
}

Tensor nll_loss_backward(const Tensor& grad_out, const Tensor& logp, const Tensor& target, bool mean) {
  check_nll(logp, target, "nll_loss_backward");
  LOCKSTEP_CHECK(grad_out.numel() == 1, "nll_loss_backward: expected a one-element gradient, got ", grad_out.shape());
  Tensor g = zeros(logp.shape(), {logp.dtype(), logp.device()});
  int64_t n = logp.size(0);
  if (n) backend_for(logp.device()).nll_loss_backward(g, grad_out, target, mean ? 1.0 / n : 1.0);
  return g;
}

// --- indexing ------------------------------------------------------------------------------------

static void check_index(const Tensor& index, const char* op) {
  check_defined(index, op);
  LOCKSTEP_CHECK(index.dtype() == kInt64, op, ": expected an int64 index, got ", index.dtype());
  LOCKSTEP_CHECK(index.dim() == 1, op, ": expected a 1-D index, got ", index.shape());
}

Tensor index_select(const Tensor& a, const Tensor& index) {
  check_defined(a, "index_select");
  check_index(index, "index_select");
  LOCKSTEP_CHECK(a.dim() >= 1, "index_select: cannot select rows of a 0-D tensor");
  check_same_device(a, index, "index_select");
  Shape s = a.shape();
  s[0] = index.size(0);
  Tensor out(s, a.dtype(), a.device());
  if (out.numel() || index.numel()) backend_for(a.device()).index_select(out, a, index);
  return out;
}

void index_add_(Tensor& out, const Tensor& index, const Tensor& src) {
  check_defined(out, "index_add_");
  check_index(index, "index_add_");
  check_same_dtype(out, src, "index_add_");
  check_same_device(out, src, "index_add_");
  check_same_device(out, index, "index_add_");
  LOCKSTEP_CHECK(src.dim() == out.dim() && src.dim() >= 1 && src.size(0) == index.size(0) &&
                     Shape(src.shape().begin() + 1, src.shape().end()) == Shape(out.shape().begin() + 1, out.shape().end()),
                 "index_add_: source ", src.shape(), " with index ", index.shape(), " does not fit into ", out.shape());
  if (src.numel()) backend_for(out.device()).index_add(out, index, src);
}

Tensor stack(const std::vector<Tensor>& ts) {
  LOCKSTEP_CHECK(!ts.empty(), "stack: expected at least one tensor");
  const Tensor& f = ts[0];
  check_defined(f, "stack");
  Shape s = f.shape();
  s.insert(s.begin(), static_cast<int64_t>(ts.size()));
  Tensor out(s, f.dtype(), f.device());
  for (size_t i = 0; i < ts.size(); ++i) {
    LOCKSTEP_CHECK(ts[i].defined() && ts[i].shape() == f.shape() && ts[i].dtype() == f.dtype() &&
                       ts[i].device() == f.device(),
                   "stack: tensor ", i, " is ", ts[i].defined() ? ts[i].shape() : Shape{}, " but tensor 0 is ",
                   f.shape(), " ", f.dtype(), " on ", f.device());
    Tensor dst = view_range(out, static_cast<int64_t>(i) * f.numel(), f.shape());
    copy_(dst, ts[i]);
  }
  return out;
}

// --- conversion and copies -----------------------------------------------------------------------

Tensor to_dtype(const Tensor& a, Dtype dtype) {
  check_defined(a, "to");
  if (a.dtype() == dtype) return a;
  Tensor out(a.shape(), dtype, a.device());
  if (out.numel()) backend_for(a.device()).cast(out, a);
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

Tensor reshape(const Tensor& a, const Shape& shape) {
  check_defined(a, "reshape");
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      LOCKSTEP_CHECK(infer < 0, "reshape: only one dimension can be -1, got ", shape);
      infer = static_cast<int64_t>(i);
    } else {
      LOCKSTEP_CHECK(s[i] >= 0, "reshape: invalid dimension in ", shape);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    LOCKSTEP_CHECK(known > 0 && a.numel() % known == 0, "reshape: cannot reshape ", a.shape(), " into ", shape);
    s[infer] = a.numel() / known;
    known *= s[infer];
  }
  LOCKSTEP_CHECK(known == a.numel(), "reshape: cannot reshape ", a.shape(), " (", a.numel(), " elements) into ", shape);
  return view_range(a, 0, s);
}

Tensor view_range(const Tensor& base, int64_t offset, const Shape& shape) {
  check_defined(base, "view_range");
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  LOCKSTEP_CHECK(offset >= 0 && n >= 0 && offset + n <= base.numel(), "view_range: elements [", offset, ", ",
                 offset + n, ") are outside a tensor of ", base.numel(), " elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->offset = base.impl()->offset + offset;
  impl->shape = shape;
  impl->numel = n;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

void copy_(Tensor& dst, const Tensor& src) {
  check_defined(dst, "copy_");
  check_defined(src, "copy_");
  LOCKSTEP_CHECK(dst.numel() == src.numel(), "copy_: source ", src.shape(), " and destination ", dst.shape(),
                 " differ in size");
  LOCKSTEP_CHECK(dst.dtype() == src.dtype(), "copy_: dtypes differ: ", src.dtype(), " into ", dst.dtype());
  if (!dst.numel()) return;
  // The non-CPU side's backend knows how to reach the host.
  Device d = dst.device().is_cuda() ? dst.device() : src.device();
  backend_for(d).copy(dst, src);
}

void fill_(Tensor& t, double value) {
  check_defined(t, "fill_");
  if (t.numel()) backend_for(t.device()).fill(t, value);
}

void add_(Tensor& a, const Tensor& b, double alpha) {
  check_defined(a, "add_");
  check_defined(b, "add_");
  check_same_device(a, b, "add_");
  check_same_dtype(a, b, "add_");
  LOCKSTEP_CHECK(broadcast_shapes(a.shape(), b.shape(), "add_") == a.shape(), "add_: cannot add ", b.shape(),
                 " into ", a.shape(), " in place");
  if (!a.numel()) return;
  BroadcastPlan plan = make_plan(a.shape(), a.shape(), b.shape());
  Backend& be = backend_for(a.device());
  if (alpha == 1.0) {
    be.binary(BinaryOp::Add, a, a, b, plan);
  } else {
    Tensor scaled(b.shape(), b.dtype(), b.device());
    be.binary_scalar(BinaryOp::Mul, scaled, b, alpha, false);
    be.binary(BinaryOp::Add, a, a, scaled, plan);
  }
}

void sgd_step_(Tensor& param, const Tensor& grad, Tensor& buf, double lr, double momentum, double dampening,
               double weight_decay, bool nesterov, bool first_step) {
  check_defined(param, "sgd_step_");
  check_defined(grad, "sgd_step_");
  check_floating(param, "sgd_step_");
  LOCKSTEP_CHECK(grad.shape() == param.shape() && grad.dtype() == param.dtype() && grad.device() == param.device(),
                 "sgd_step_: gradient ", grad.shape(), " ", grad.dtype(), " on ", grad.device(),
                 " does not match parameter ", param.shape(), " ", param.dtype(), " on ", param.device());
  if (momentum != 0) {
    LOCKSTEP_CHECK(buf.defined() && buf.shape() == param.shape() && buf.dtype() == param.dtype() &&
                       buf.device() == param.device(),
                   "sgd_step_: momentum buffer does not match parameter ", param.shape());
  }
  // The kernels read and write the three arrays as distinct memory.
  LOCKSTEP_CHECK(grad.data_ptr() != param.data_ptr() && (momentum == 0 || (buf.data_ptr() != param.data_ptr() &&
                                                                              buf.data_ptr() != grad.data_ptr())),
                 "sgd_step_: the parameter, its gradient and its momentum buffer must be distinct tensors");
  if (param.numel())
    backend_for(param.device()).sgd_step(param, grad, buf, lr, momentum, dampening, weight_decay, nesterov, first_step);
}

void mul_(Tensor& a, double s) {
  check_defined(a, "mul_");
  if (a.numel()) backend_for(a.device()).binary_scalar(BinaryOp::Mul, a, a, s, false);
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

}  // namespace lockstep::ops
