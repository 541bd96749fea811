// Differentiable reductions and softmax. Sums broadcast the gradient back (a view, no copy); max/min
// send it to the chosen element; amax/amin split it among ties, as PyTorch; var, std, logsumexp and
// norm are compositions of the ops above them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
constexpr autograd::Output kSavesOutput = autograd::Output::Saved;
namespace in = internal;

namespace {

int64_t count_of(const Tensor& a, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= a.dim() ? a.shape()[d] : 1;
  return n;
}

// `shape` without the reduced `dims` (sorted): a reduction's shape without keepdim.
Shape dropped_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) s.push_back(shape[d]);
  return s;
}

// g (reduced over dims, with or without keepdim) broadcast back to `shape`.
Tensor unreduce(const Tensor& g, const Shape& shape, const std::vector<int64_t>& dims) {
  return in::expand(in::reshape(g, in::kept_shape(shape, dims)), shape);
}

// amax/amin over dims: the gradient is split evenly among the elements equal to the result.
Tensor extreme(const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim, bool is_max, const char* name) {
  LOCKSTEP_CHECK(a.defined(), name, ": got an undefined tensor");
  std::vector<int64_t> dims = in::reduction_dims(dims_in, a.dim(), name);
  Tensor out = a;
  for (size_t i = dims.size(); i-- > 0;)
    out = in::reduce(is_max ? Reduction::Max : Reduction::Min, out, dims[i], true, name);
  if (dims.empty()) out = in::clone(a);
  Tensor kept = out;
  if (!keepdim) out = in::reshape(out, dropped_shape(a.shape(), dims));
  if (!any_requires_grad(a)) return out;
  return record(name, out, {a}, [a = a.detach(), kept, dims](const Tensor& g) {
    Tensor hit = in::to_dtype(in::eq(a, kept), g.dtype());
    Tensor count = in::sum(hit, dims, true);
    return Grads{in::mul(hit, in::div(in::reshape(g, kept.shape()), count))};
  }, kSavesOutput);  // kept is the output before the reshape: the same storage
}

// max/min along one dimension: the gradient goes to the element the index points at.
std::tuple<Tensor, Tensor> extreme_dim(const Tensor& a, int64_t dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  Tensor out = in::reduce(is_max ? Reduction::Max : Reduction::Min, a, dim, keepdim, name);
  const int64_t d = in::wrap_dim(dim, std::max<int64_t>(a.dim(), 1), name);
  Tensor idx = in::reduce(is_max ? Reduction::Argmax : Reduction::Argmin, a, d, true, name);
  Tensor indices = keepdim || a.dim() == 0 ? idx : in::squeeze(idx, d);
  if (!any_requires_grad(a)) return {out, indices};
  out = record(name, out, {a}, [s = a.shape(), idx, d, keepdim](const Tensor& g) {
    Tensor ga = zeros(s, {g.dtype(), g.device()});
    if (s.empty()) return Grads{in::reshape(g, s)};
    in::scatter_add_(ga, d, idx, keepdim ? g : in::unsqueeze(g, d));
    return Grads{ga};
  });
  return {out, indices};
}

// d prod / d a_i over dims (one dim, or all), times g, with PyTorch's handling of zeros: where the
// reduced slice has no zero, prod / a_i; with one zero, the product of the others at the zero and 0
// elsewhere; with two or more, 0. The product of the nonzero elements gives all three cases without
// dividing by zero (prod / a_i alone is NaN at a zero).
Tensor prod_backward(const Tensor& g, const Tensor& a, const std::vector<int64_t>& dims) {
  const Shape kept = in::kept_shape(a.shape(), dims);
  const Tensor is_zero = in::binary_scalar(BinaryOp::Eq, a, 0.0);
  const Tensor zero_f = in::to_dtype(is_zero, a.dtype());
  const Tensor nonzero = in::add(a, zero_f);  // the zeros replaced by ones
  const Tensor p = dims.size() == 1 && a.dim() > 0 ? in::prod(nonzero, dims[0], true)
                                                   : in::reshape(in::prod(nonzero), kept);
  const Tensor zeros_in_slice = in::expand(in::sum(is_zero, dims, true), a.shape());  // int64
  const Tensor none = in::binary_scalar(BinaryOp::Eq, zeros_in_slice, 0.0);
  const Tensor one = in::to_dtype(in::binary_scalar(BinaryOp::Eq, zeros_in_slice, 1.0), a.dtype());
  const Tensor d = in::where(none, in::div(p, nonzero), in::mul(in::mul(p, zero_f), one));
  return in::mul(unreduce(g, a.shape(), dims), d);
}

}  // namespace

Tensor prod(const Tensor& a_in) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Prod, a_in);
  LOCKSTEP_CHECK(a.defined(), "prod: got an undefined tensor");
  Tensor out = in::prod(a);
  if (!any_requires_grad(a)) return out;
  return record("prod", out, {a}, [a = a.detach()](const Tensor& g) {
    return Grads{prod_backward(g, a, in::reduction_dims({}, a.dim(), "prod"))};
  });
}
Tensor prod(const Tensor& a_in, int64_t dim, bool keepdim) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Prod, a_in);
  LOCKSTEP_CHECK(a.defined(), "prod: got an undefined tensor");
  Tensor out = in::prod(a, dim, keepdim);
  if (!any_requires_grad(a)) return out;
  const int64_t d = in::wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "prod");
  return record("prod", out, {a}, [a = a.detach(), d](const Tensor& g) {
    return Grads{a.dim() == 0 ? in::reshape(g, a.shape()) : prod_backward(g, a, {d})};
  });
}

Tensor sum(const Tensor& a_in, const std::vector<int64_t>& dims_in, bool keepdim) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Sum, a_in);
  LOCKSTEP_CHECK(a.defined(), "sum: got an undefined tensor");
  std::vector<int64_t> dims = in::reduction_dims(dims_in, a.dim(), "sum");
  Tensor out = in::sum(a, dims, keepdim);
  if (!any_requires_grad(a)) return out;
  return record("sum", out, {a}, [s = a.shape(), dims](const Tensor& g) { return Grads{unreduce(g, s, dims)}; });
}
Tensor sum(const Tensor& a) { return sum(a, std::vector<int64_t>{}, false); }
Tensor sum(const Tensor& a, int64_t dim, bool keepdim) { return sum(a, std::vector<int64_t>{dim}, keepdim); }

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim) {
  LOCKSTEP_CHECK(a.defined(), "mean: got an undefined tensor");
  LOCKSTEP_CHECK(a.is_floating_point(), "mean: expected a floating-point tensor, got ", a.dtype());
  std::vector<int64_t> dims = in::reduction_dims(dims_in, a.dim(), "mean");
  const int64_t n = count_of(a, dims);
  Tensor out = dims.size() == 1 ? in::mean(a, dims[0], keepdim) : in::mul(in::sum(a, dims, keepdim), 1.0 / n);
  if (!any_requires_grad(a)) return out;
  return record("mean", out, {a}, [s = a.shape(), dims, n](const Tensor& g) {
    return Grads{unreduce(in::mul(g, 1.0 / n), s, dims)};
  });
}
Tensor mean(const Tensor& a) { return mean(a, std::vector<int64_t>{}, false); }
Tensor mean(const Tensor& a, int64_t dim, bool keepdim) { return mean(a, std::vector<int64_t>{dim}, keepdim); }

Tensor var(const Tensor& a, const std::vector<int64_t>& dims_in, bool unbiased, bool keepdim) {
  LOCKSTEP_CHECK(a.defined(), "var: got an undefined tensor");
  LOCKSTEP_CHECK(a.is_floating_point(), "var: expected a floating-point tensor, got ", a.dtype());
  std::vector<int64_t> dims = in::reduction_dims(dims_in, a.dim(), "var");
  const int64_t n = count_of(a, dims);
  Tensor centered = sub(a, mean(a, dims, true));
  return mul(sum(mul(centered, centered), dims, keepdim), 1.0 / static_cast<double>(n - (unbiased ? 1 : 0)));
}

Tensor std(const Tensor& a, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  LOCKSTEP_CHECK(a.defined(), "std: got an undefined tensor");
  in::reduction_dims(dims, a.dim(), "std");
  return sqrt(var(a, dims, unbiased, keepdim));
}

Tensor amax(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme(a, dims, keepdim, true, "amax");
}
Tensor amin(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme(a, dims, keepdim, false, "amin");
}
Tensor max(const Tensor& a) { return extreme(a, {}, false, true, "max"); }
Tensor min(const Tensor& a) { return extreme(a, {}, false, false, "min"); }
std::tuple<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_dim(a, dim, keepdim, true);
}
std::tuple<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim) {
  return extreme_dim(a, dim, keepdim, false);
}
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return in::reduce(Reduction::Argmax, a, dim, keepdim, "argmax");
}
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim) {
  return in::reduce(Reduction::Argmin, a, dim, keepdim, "argmin");
}

// log(sum(exp(a - m))) + m with m the (constant) maximum, so exp never overflows; rows that are all
// -inf give -inf.
Tensor logsumexp(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  LOCKSTEP_CHECK(a.defined(), "logsumexp: got an undefined tensor");
  in::reduction_dims(dims, a.dim(), "logsumexp");
  Tensor m;
  {
    NoGradGuard no_grad;
    m = amax(a, dims, true);
    // An all -inf (or inf) row would give inf - inf = nan: shift such rows by 0 instead.
    Tensor finite = in::binary_scalar(BinaryOp::Lt, in::abs(m), std::numeric_limits<double>::infinity());
    m = in::where(finite, m, zeros({}, {m.dtype(), m.device()}));
  }
  Tensor out = add(log(sum(exp(sub(a, m)), dims, true)), m);
  return keepdim ? out : reshape(out, dropped_shape(a.shape(), in::reduction_dims(dims, a.dim(), "logsumexp")));
}

Tensor norm(const Tensor& a, double p, const std::vector<int64_t>& dims, bool keepdim) {
  LOCKSTEP_CHECK(a.defined(), "norm: got an undefined tensor");
  LOCKSTEP_CHECK(p > 0, "norm: p must be positive (or inf), got ", p);
  in::reduction_dims(dims, a.dim(), "norm");
  if (std::isinf(p)) return amax(abs(a), dims, keepdim);
  if (p == 1) return sum(abs(a), dims, keepdim);
  if (p == 2) return sqrt(sum(mul(a, a), dims, keepdim));
  return pow(sum(pow(abs(a), p), dims, keepdim), 1.0 / p);
}

namespace {
Tensor softmax_of(const Tensor& a_in, int64_t dim, bool log) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Softmax, a_in);
  Tensor out = in::softmax(a, dim, log);
  if (!any_requires_grad(a)) return out;
  return record(log ? "log_softmax" : "softmax", out, {a}, [out = out.detach(), dim, log](const Tensor& g) {
    return Grads{in::softmax_backward(g, out, dim, log)};
  }, kSavesOutput);
}
}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_of(a, dim, false); }
Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_of(a, dim, true); }

}  // namespace lockstep
