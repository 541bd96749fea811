// Scatters that write or reduce into a copy of a tensor (scatter, scatter_reduce, index_put) and their
// in-place forms (Tensor::scatter_, scatter_reduce_, index_put_), with PyTorch's gradients. Each op is a
// graph-free `raw` write into its output plus a backward made from self's old value and the result;
// the out-of-place form records it on a clone, the in-place form writes into self and rebases self's
// history onto it, as inplace.cpp's ops do. The kernels are scatter_add's and tensor/scatter_ops.h's.
#include <functional>
#include <optional>
#include <string>

#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::BackwardFn;
using autograd::Grads;
using autograd::record;
namespace in = internal;

namespace {

enum class Reduce { Sum, Prod, Mean, Amax, Amin };

Reduce parse_reduce(const std::string& r) {
  if (r == "sum") return Reduce::Sum;
  if (r == "prod") return Reduce::Prod;
  if (r == "mean") return Reduce::Mean;
  if (r == "amax") return Reduce::Amax;
  if (r == "amin") return Reduce::Amin;
  fail("scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got ", r);
}

// scatter's deprecated `reduce`: "add" and "multiply" are scatter_reduce's sum and prod with self.
Reduce parse_scatter_reduce(const std::string& r) {
  if (r == "add") return Reduce::Sum;
  if (r == "multiply") return Reduce::Prod;
  fail("scatter: reduce argument must be either add or multiply, got ", r);
}

// PyTorch's checks on self, index and src (src undefined: a scalar value); shapes are checked by the
// ops layer, index values by the kernels.
void check_scatter(const Tensor& self, const Tensor& index, const Tensor& src, const char* op) {
  LOCKSTEP_CHECK(self.defined() && index.defined(), op, ": got an undefined tensor");
  LOCKSTEP_CHECK(index.dtype() == kInt64, op, "(): Expected dtype int64 for index, got ", index.dtype());
  if (src.defined()) {
    LOCKSTEP_CHECK(src.dtype() == self.dtype(), op, "(): Expected self.dtype to be equal to src.dtype (", self.dtype(),
                   " and ", src.dtype(), ")");
  }
}

// A scalar `value` shaped as index, for the kernels.
Tensor value_like(const Tensor& self, const Tensor& index, double value) {
  return in::expand(full({}, value, {self.dtype(), self.device()}), index.shape());
}

// src narrowed to index's sizes: the elements a scatter reads.
Tensor used_part(const Tensor& src, const Tensor& index) {
  Tensor s = src;
  for (int64_t k = 0; k < index.dim(); ++k)
    if (s.shape()[k] != index.shape()[k]) s = in::narrow(s, k, 0, index.shape()[k]);
  return s;
}

// g (index's shape) zero-padded to src's shape: src's elements beyond index were not used.
Tensor pad_to(const Tensor& g, const Shape& src_shape) {
  if (g.shape() == src_shape) return g;
  Tensor full_grad = zeros(src_shape, {g.dtype(), g.device()});
  Tensor part = full_grad;
  for (int64_t k = 0; k < g.dim(); ++k) part = in::narrow(part, k, 0, g.shape()[k]);
  in::copy_(part, g);
  return full_grad;
}

// out with `value` written at index along dim (the zeroing of a gradient where self was overwritten).
Tensor assigned(const Tensor& out, int64_t dim, const Tensor& index, double value) {
  Tensor r = in::clone(out);
  in::scatter_(r, dim, index, value_like(r, index, value), Scatter::Assign);
  return r;
}

Tensor equal_to(const Tensor& a, double v) { return in::binary_scalar(BinaryOp::Eq, a, v); }
Tensor where_scalar(const Tensor& cond, double v, const Tensor& b) {
  return in::where(cond, full({}, v, {b.dtype(), b.device()}), b);
}

// How many values index sends to each position of out (out's dtype): one count per row ([.., n, 1, ..])
// when index repeats along every dimension after dim, as a graph's expanded edge targets do, so the
// counts cost one pass over the rows; else out's shape.
Tensor scatter_counts(const Tensor& out, int64_t dim, const Tensor& index) {
  const int64_t d = dim < 0 ? dim + out.dim() : dim;
  // Per row only where the index spans out's rows whole: a narrower index leaves some of a row unreached.
  bool spans = true;
  for (int64_t k = d + 1; k < index.dim(); ++k) spans = spans && index.size(k) == out.size(k);
  const Tensor rows = spans ? in::row_index(index, d) : Tensor();
  const Tensor idx = rows.defined() ? rows : index;
  Shape shape = out.shape();
  if (rows.defined())
    for (int64_t k = d + 1; k < index.dim(); ++k) shape[k] = 1;
  Tensor count = zeros(shape, {out.dtype(), out.device()});
  in::scatter_add_(count, d, idx, in::expand(ones({}, {out.dtype(), out.device()}), idx.shape()));
  return count;
}

// scatter_reduce into out in place, graph-free. Without self, the positions scattered to start from the
// reduction's identity (amax and amin: from one of their own values, which the reduction then keeps).
void scatter_reduce_raw(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, Reduce r,
                        bool include_self) {
  // mean: the sum over the count of values at each position (self counting as one), in out's dtype;
  // integers round down, as PyTorch's.
  Tensor count;
  if (r == Reduce::Mean || (!include_self && r != Reduce::Amax && r != Reduce::Amin))
    count = scatter_counts(out, dim, index);
  if (!include_self) {
    if (r == Reduce::Amax || r == Reduce::Amin) {
      in::scatter_(out, dim, index, src, Scatter::Assign);
    } else {
      in::copy_(out, where_scalar(in::binary_scalar(BinaryOp::Gt, count, 0), r == Reduce::Prod ? 1 : 0, out));
    }
  }
  switch (r) {
    case Reduce::Sum: in::scatter_add_(out, dim, index, src); return;
    case Reduce::Prod: in::scatter_(out, dim, index, src, Scatter::Multiply); return;
    case Reduce::Amax: in::scatter_(out, dim, index, src, Scatter::Amax); return;
    case Reduce::Amin: in::scatter_(out, dim, index, src, Scatter::Amin); return;
    case Reduce::Mean: break;
  }
  in::scatter_add_(out, dim, index, src);
  if (include_self) count = in::add(count, ones({}, {count.dtype(), count.device()}));
  count = where_scalar(equal_to(count, 0), 1, count);
  Tensor mean = out.is_floating_point()
                    ? in::div(out, count)
                    : in::to_dtype(in::unary(UnaryOp::Floor, in::div(in::to_dtype(out, kFloat64),
                                                                      in::to_dtype(count, kFloat64))),
                                   out.dtype());
  in::copy_(out, mean);
}

// PyTorch's scatter_reduce_backward: gradients for self and for the used part of src (s).
Grads scatter_reduce_grads(const Tensor& g, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& s,
                           const Tensor& result, Reduce r, bool include_self) {
  const Dtype dt = g.dtype();
  Tensor grad_self, grad_src;
  switch (r) {
    case Reduce::Sum:
      grad_self = g;
      grad_src = in::gather(g, dim, index);
      break;
    case Reduce::Mean: {
      Tensor n = full(self.shape(), include_self ? 1 : 0, {dt, g.device()});
      in::scatter_add_(n, dim, index, in::expand(ones({}, {dt, g.device()}), index.shape()));
      n = where_scalar(equal_to(n, 0), 1, n);
      grad_self = in::div(g, n);
      grad_src = in::div(in::gather(g, dim, index), in::gather(n, dim, index));
      break;
    }
    case Reduce::Amax:
    case Reduce::Amin: {  // split evenly among the elements equal to the result
      Tensor value = in::gather(result, dim, index);
      Tensor self_is = in::to_dtype(in::eq(self, result), dt), src_is = in::to_dtype(in::eq(s, value), dt);
      Tensor n = in::clone(self_is);
      in::scatter_add_(n, dim, index, src_is);
      Tensor share = in::div(g, n);
      grad_self = in::mul(self_is, share);
      grad_src = in::mul(src_is, in::gather(share, dim, index));
      break;
    }
    case Reduce::Prod: {  // the product of the others, computed without dividing by a zero
      Tensor masked_self = where_scalar(equal_to(self, 0), 1, self);
      Tensor self_excluded = in::clone(masked_self);
      scatter_reduce_raw(self_excluded, dim, index, s, r, include_self);
      grad_self = in::div(in::mul(g, self_excluded), masked_self);
      Tensor src_zero = equal_to(s, 0);
      Tensor zeros_at = zeros(self.shape(), {dt, g.device()});
      in::scatter_add_(zeros_at, dim, index, in::to_dtype(src_zero, dt));
      Tensor single_zero = in::binary(BinaryOp::LogicalAnd, src_zero, equal_to(in::gather(zeros_at, dim, index), 1));
      Tensor src_excluded = in::clone(self);
      scatter_reduce_raw(src_excluded, dim, index, where_scalar(single_zero, 1, s), r, include_self);
      grad_src = in::where(single_zero, in::gather(in::mul(g, src_excluded), dim, index),
                           in::div(in::gather(in::mul(g, result), dim, index), where_scalar(src_zero, 1, s)));
      break;
    }
  }
  if (!include_self) grad_self = assigned(grad_self, dim, index, 0);
  return {grad_self, grad_src};
}

// Makes an op's backward from self's old value and the result, which it reads only where `keeps`
// (otherwise they are undefined, and the op's output may change in place before backward).
using MakeBackward = std::function<BackwardFn(const Tensor& self_old, const Tensor& result)>;

// Whether an in-place op on t (and `operand`) is recorded; refuses what inplace.cpp's ops refuse.
bool recording(const Tensor& t, const Tensor& operand, const char* op) {
  const bool operand_grad = operand.defined() && operand.requires_grad();
  if (!GradMode::is_enabled() || (!t.requires_grad() && !operand_grad)) return false;
  LOCKSTEP_CHECK(!t.requires_grad() || t.grad_fn(), op, ": a leaf tensor ", t.shape(), " that requires grad can't "
                 "be modified in place while grad mode is on (use the out-of-place op, or a NoGradGuard block)");
  LOCKSTEP_CHECK(!t.requires_grad() || !t.grad_fn()->is_view, op, ": can't modify in place the view ", t.shape(),
                 " (made by ", t.grad_fn()->name(), ") of a tensor that requires grad; use the out-of-place op");
  LOCKSTEP_CHECK(t.requires_grad() || t.storage().use_count() == 1, op, ": the tensor ", t.shape(), " shares its "
                 "storage with another tensor that would not see the gradient of the operand; clone() it first");
  return true;
}

std::vector<Tensor> inputs_of(const Tensor& self, const Tensor& operand) {
  if (operand.defined()) return {self, operand};
  return {self};
}

Tensor out_of_place(const char* op, const Tensor& self, const Tensor& operand,
                    const std::function<void(Tensor&)>& raw, const MakeBackward& make, bool keeps) {
  Tensor out = in::clone(self);
  raw(out);
  const bool grad = operand.defined() ? any_requires_grad(self, operand) : any_requires_grad(self);
  if (!grad) return out;
  if (!keeps) return record(op, out, inputs_of(self, operand), make(Tensor(), Tensor()));
  return record(op, out, inputs_of(self, operand), make(self.detach(), out.detach()), autograd::Output::Saved);
}

const Tensor& in_place(const char* op, const Tensor& self, const Tensor& operand,
                       const std::function<void(Tensor&)>& raw, const MakeBackward& make, bool keeps) {
  LOCKSTEP_CHECK(self.defined(), op, ": the tensor is undefined");
  const bool rec = recording(self, operand, op);
  Tensor self_old = rec && keeps ? in::clone(self) : Tensor();
  Tensor t = self;
  raw(t);
  self.storage()->bump_version();
  if (rec) {
    Tensor result = keeps ? in::clone(self) : Tensor();
    autograd::rebase_history(self, std::make_shared<autograd::FunctionNode>(op, make(self_old, result)),
                             inputs_of(self, operand));
  }
  return self;
}

// scatter, scatter_ (src or value; reduce "", "add" or "multiply"), scatter_reduce and scatter_reduce_.
struct ScatterCall {
  int64_t dim;
  Tensor index, src;  // src undefined: value
  double value = 0;
  std::optional<Reduce> reduce;  // unset: assign
  bool include_self = true;

  void raw(Tensor& out) const {
    const Tensor s = src.defined() ? src : value_like(out, index, value);
    if (reduce) scatter_reduce_raw(out, dim, index, s, *reduce, include_self);
    else in::scatter_(out, dim, index, s, Scatter::Assign);
  }

  // sum and assign read neither self's old value nor the result; the rest do.
  bool keeps() const { return reduce && *reduce != Reduce::Sum; }

  MakeBackward backward() const {
    return [c = *this](const Tensor& self_old, const Tensor& result) -> BackwardFn {
      const Shape src_shape = c.src.defined() ? c.src.shape() : Shape();
      const Tensor s = c.src.defined() ? used_part(c.src.detach(), c.index) : Tensor();
      return [c, self_old, result, s, src_shape](const Tensor& g) {
        Grads grads;
        if (!c.reduce) grads = {assigned(g, c.dim, c.index, 0), s.defined() ? in::gather(g, c.dim, c.index) : Tensor()};
        else grads = scatter_reduce_grads(g, self_old, c.dim, c.index,
                                          s.defined() ? s : value_like(g, c.index, c.value), result, *c.reduce,
                                          c.include_self);
        if (!s.defined()) return Grads{grads[0]};
        return Grads{grads[0], pad_to(grads[1], src_shape)};
      };
    };
  }
};

Tensor scatter_op(const char* op, const Tensor& self, const ScatterCall& c) {
  check_scatter(self, c.index, c.src, op);
  return out_of_place(op, self, c.src, [&c](Tensor& out) { c.raw(out); }, c.backward(), c.keeps());
}

const Tensor& scatter_op_(const char* op, const Tensor& self, const ScatterCall& c) {
  check_scatter(self, c.index, c.src, op);
  return in_place(op, self, c.src, [&c](Tensor& out) { c.raw(out); }, c.backward(), c.keeps());
}

}  // namespace

Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_op("scatter", a, {dim, index, src, 0, std::nullopt, true});
}
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, double value) {
  return scatter_op("scatter", a, {dim, index, Tensor(), value, std::nullopt, true});
}
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce) {
  return scatter_op("scatter", a, {dim, index, src, 0, parse_scatter_reduce(reduce), true});
}
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, double value, const std::string& reduce) {
  return scatter_op("scatter", a, {dim, index, Tensor(), value, parse_scatter_reduce(reduce), true});
}
Tensor scatter_reduce(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self) {
  return scatter_op("scatter_reduce", a, {dim, index, src, 0, parse_reduce(reduce), include_self});
}

const Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) const {
  return scatter_op_("scatter_", *this, {dim, index, src, 0, std::nullopt, true});
}
const Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, double value) const {
  return scatter_op_("scatter_", *this, {dim, index, Tensor(), value, std::nullopt, true});
}
const Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce) const {
  return scatter_op_("scatter_", *this, {dim, index, src, 0, parse_scatter_reduce(reduce), true});
}
const Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, double value, const std::string& reduce) const {
  return scatter_op_("scatter_", *this, {dim, index, Tensor(), value, parse_scatter_reduce(reduce), true});
}
const Tensor& Tensor::scatter_reduce_(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                                      bool include_self) const {
  return scatter_op_("scatter_reduce_", *this, {dim, index, src, 0, parse_reduce(reduce), include_self});
}

namespace {

// index_put's indices as one int64 position per indexed element into self viewed as [P, rest...] (P the
// product of the k indexed dimensions): bool masks become their nonzero positions, int64 indices
// broadcast together and wrap when negative. Computed on the host (a bool mask's count needs it
// anyway), where each index is checked.
struct IndexPut {
  Tensor lin;          // int64 [N], on self's device
  Shape indexed;       // the broadcast index shape B (N elements)
  Shape flat, target;  // self as [P, rest...]; the values' shape B + rest
};

IndexPut plan_index_put(const Tensor& self, const std::vector<Tensor>& indices, const char* op) {
  LOCKSTEP_CHECK(self.defined(), op, ": got an undefined tensor");
  LOCKSTEP_CHECK(!indices.empty(), op, ": expected at least one index tensor");
  std::vector<Tensor> ints;  // one int64 index per indexed dimension
  for (size_t i = 0; i < indices.size(); ++i) {
    const Tensor& t = indices[i];
    LOCKSTEP_CHECK(t.defined(), op, ": index ", i, " is undefined (only leading index tensors are supported)");
    LOCKSTEP_CHECK(t.dtype() == kInt64 || t.dtype() == kBool, op, ": tensors used as indices must be long or bool "
                   "tensors, got ", t.dtype(), " at index ", i);
    if (t.dtype() == kInt64) {
      ints.push_back(t);
      continue;
    }
    const int64_t at = static_cast<int64_t>(ints.size());
    bool fits = at + t.dim() <= self.dim();
    for (int64_t d = 0; fits && d < t.dim(); ++d) fits = t.shape()[d] == self.shape()[at + d];
    LOCKSTEP_CHECK(fits, op, ": the shape of the mask ", t.shape(), " at index ", i,
                   " does not match the shape of the indexed tensor ", self.shape());
    Tensor nz = lockstep::nonzero(t.detach());  // [n, t.dim()]
    for (int64_t d = 0; d < t.dim(); ++d) ints.push_back(in::select(nz, 1, d));
  }
  const int64_t k = static_cast<int64_t>(ints.size());
  LOCKSTEP_CHECK(k <= self.dim(), op, ": too many indices for tensor of dimension ", self.dim(), " (got ", k, ")");
  IndexPut p;
  for (const Tensor& t : ints) p.indexed = in::broadcast_shapes(p.indexed, t.shape(), op);
  int64_t n = 1, rows = 1;
  for (int64_t s : p.indexed) n *= s;
  for (int64_t d = 0; d < k; ++d) rows *= self.shape()[d];
  std::vector<int64_t> lin(n, 0);
  for (int64_t d = 0, stride = rows; d < k; ++d) {
    const int64_t size = self.shape()[d];
    stride /= size;
    std::vector<int64_t> v = in::contiguous(in::expand(ints[d], p.indexed)).to_vector<int64_t>();
    for (int64_t e = 0; e < n; ++e) {
      LOCKSTEP_CHECK(v[e] >= -size && v[e] < size, op, ": index ", v[e], " is out of bounds for dimension ", d,
                     " with size ", size);
      lin[e] += (v[e] < 0 ? v[e] + size : v[e]) * stride;
    }
  }
  p.lin = in::to_device(tensor(lin, {n}), self.device());
  p.flat = {rows};
  p.target = p.indexed;
  p.flat.insert(p.flat.end(), self.shape().begin() + k, self.shape().end());
  p.target.insert(p.target.end(), self.shape().begin() + k, self.shape().end());
  return p;
}

void check_values(const Tensor& self, const Tensor& values, const IndexPut& p, const char* op) {
  LOCKSTEP_CHECK(values.defined(), op, ": the values are undefined");
  LOCKSTEP_CHECK(values.dtype() == self.dtype(), op, ": Index put requires the source and destination dtypes "
                 "match, got ", self.dtype(), " for the destination and ", values.dtype(), " for the source");
  LOCKSTEP_CHECK(values.device() == self.device(), op, ": values on ", values.device(), " but tensor on ",
                 self.device());
  bool fits = values.dim() <= static_cast<int64_t>(p.target.size());
  for (int64_t d = 0; fits && d < values.dim(); ++d) {
    const int64_t have = values.shape()[d], want = p.target[p.target.size() - values.dim() + d];
    fits = have == want || have == 1;
  }
  LOCKSTEP_CHECK(fits, op, ": shape mismatch: value tensor of shape ", values.shape(),
                 " cannot be broadcast to indexing result of shape ", p.target);
}

// Writes (or adds) values at the planned positions of out, in place on any layout.
void index_put_raw(Tensor& out, const IndexPut& p, const Tensor& values, bool accumulate) {
  if (p.lin.numel() == 0) return;
  Tensor work = out.is_contiguous() ? out : in::contiguous(out);
  Tensor flat = in::view(work, p.flat);
  Shape rows = p.flat;  // [N, rest...]
  rows[0] = p.lin.numel();
  Tensor vals = in::contiguous(in::reshape(in::contiguous(in::expand(values, p.target)), rows));
  if (accumulate) {
    in::index_add_(flat, 0, p.lin, vals);
  } else {
    Shape col(rows.size(), 1);  // lin as [N, 1, ...], expanded over the rest
    col[0] = rows[0];
    in::scatter_(flat, 0, in::contiguous(in::expand(in::view(p.lin, col), rows)), vals, Scatter::Assign);
  }
  if (!work.is_same(out)) in::copy_(out, work);
}

MakeBackward index_put_backward(const IndexPut& p, const Tensor& values, bool accumulate) {
  return [p, vs = values.shape(), vd = values.dtype(), accumulate](const Tensor&, const Tensor&) -> BackwardFn {
    return [p, vs, vd, accumulate](const Tensor& g) {
      Tensor g_flat = in::reshape(g, p.flat);
      Tensor gv = in::reshape(in::index_select(g_flat, 0, p.lin), p.target);
      Tensor gs = g;
      if (!accumulate) {
        gs = in::clone(g_flat);
        Tensor zero = zeros(p.target, {g.dtype(), g.device()});
        index_put_raw(gs, p, zero, false);
        gs = in::reshape(gs, g.shape());
      }
      return Grads{gs, autograd::reduce_grad(gv, vs, vd)};
    };
  };
}

}  // namespace

Tensor index_put(const Tensor& a, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) {
  IndexPut p = plan_index_put(a, indices, "index_put");
  check_values(a, values, p, "index_put");
  return out_of_place("index_put", a, values, [&](Tensor& out) { index_put_raw(out, p, values, accumulate); },
                      index_put_backward(p, values, accumulate), false);
}

const Tensor& Tensor::index_put_(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) const {
  IndexPut p = plan_index_put(*this, indices, "index_put_");
  check_values(*this, values, p, "index_put_");
  return in_place("index_put_", *this, values, [&](Tensor& out) { index_put_raw(out, p, values, accumulate); },
                  index_put_backward(p, values, accumulate), false);
}

const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values) const {
  std::vector<Tensor> tensors;
  for (const TensorIndex& i : indices)
    if (i.kind == TensorIndex::Kind::Tensor) tensors.push_back(i.tensor);
  if (tensors.empty()) {
    index(indices).copy_(values);
    return *this;
  }
  LOCKSTEP_CHECK(tensors.size() == indices.size(), "index_put_: tensor indices mixed with integers, slices, None or "
                 "Ellipsis are not supported; put into the view instead (x.index({Slice(), 0}).index_put_({i}, v))");
  return index_put_(tensors, values, false);
}

const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, double value) const {
  LOCKSTEP_CHECK(defined(), "index_put_: the tensor is undefined");
  return index_put_(indices, full({}, value, {dtype(), device()}));
}

}  // namespace lockstep
