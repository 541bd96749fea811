// Differentiable views and shape ops. A view's backward puts the gradient back where the view's
// elements came from: permutations permute back, expand sums, and the views that pick elements
// (slice, narrow, select) write the gradient into zeros of the input's shape through the same view.
#include <algorithm>
#include <functional>

#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
namespace in = internal;

namespace {

// The node of a view that selects a subset of its input's elements once each. Its gradient is zeros of
// the input's shape with the incoming one written through the same view; the engine instead lets it
// add into the input's gradient slot in place (autograd/node.h), so the parts of a split land in one
// buffer.
struct SubsetViewNode final : autograd::Node {
  SubsetViewNode(const char* op, Shape input_shape, std::function<Tensor(const Tensor&)> view)
      : op_(op), input_shape_(std::move(input_shape)), view_(std::move(view)) {}
  std::string name() const override { return op_; }
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga;
    add_into_input(ga, g);
    return {ga};
  }
  bool add_into_input(Tensor& slot, const Tensor& g) override {
    if (!slot.defined()) {
      slot = zeros(input_shape_, {g.dtype(), g.device()});
      Tensor part = view_(slot);
      in::copy_(part, g);
      return true;
    }
    if (!autograd::exclusive(slot)) slot = in::clone(slot);  // another tensor sees it: add into a copy
    Tensor part = view_(slot);
    in::add_(part, g);
    return true;
  }

 private:
  const char* op_;
  Shape input_shape_;
  std::function<Tensor(const Tensor&)> view_;
};

Tensor subset_view(const char* name, const Tensor& a, const std::function<Tensor(const Tensor&)>& view) {
  Tensor out = view(a);
  if (!any_requires_grad(a)) return out;
  return record(std::make_shared<SubsetViewNode>(name, a.shape(), view), out, {a});
}

// A view whose gradient is the incoming one reshaped back to the input's shape.
Tensor reshaping(const char* name, const Tensor& a, Tensor out) {
  if (!any_requires_grad(a)) return out;
  return record(name, out, {a}, [s = a.shape()](const Tensor& g) { return Grads{in::reshape(g, s)}; });
}

}  // namespace

Tensor reshape(const Tensor& a, const Shape& shape) { return reshaping("reshape", a, in::reshape(a, shape)); }
Tensor view(const Tensor& a, const Shape& shape) { return reshaping("view", a, in::view(a, shape)); }
Tensor unsqueeze(const Tensor& a, int64_t dim) { return reshaping("unsqueeze", a, in::unsqueeze(a, dim)); }
Tensor squeeze(const Tensor& a, int64_t dim) { return reshaping("squeeze", a, in::squeeze(a, dim)); }
Tensor squeeze(const Tensor& a) { return reshaping("squeeze", a, in::squeeze(a)); }

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  LOCKSTEP_CHECK(a.defined(), "flatten: got an undefined tensor");
  if (a.dim() == 0) return reshape(a, {1});
  const int64_t s = in::wrap_dim(start_dim, a.dim(), "flatten"), e = in::wrap_dim(end_dim, a.dim(), "flatten");
  LOCKSTEP_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape(a.shape().begin(), a.shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= a.shape()[d];
  shape.push_back(n);
  shape.insert(shape.end(), a.shape().begin() + e + 1, a.shape().end());
  return reshape(a, shape);
}

Tensor contiguous(const Tensor& a) {
  Tensor out = in::contiguous(a);
  if (out.is_same(a) || !any_requires_grad(a)) return out;
  return record("contiguous", out, {a}, [](const Tensor& g) { return Grads{g}; });
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  Tensor out = in::transpose(a, d0, d1);
  if (!any_requires_grad(a)) return out;
  return record("transpose", out, {a}, [d0, d1](const Tensor& g) { return Grads{in::transpose(g, d0, d1)}; });
}

Tensor transpose(const Tensor& a) {
  Tensor out = in::transpose(a);
  if (!any_requires_grad(a)) return out;
  return record("t", out, {a}, [](const Tensor& g) { return Grads{in::transpose(g)}; });
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  Tensor out = in::permute(a, dims);
  if (!any_requires_grad(a)) return out;
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[in::wrap_dim(dims[i], a.dim(), "permute")] = static_cast<int64_t>(i);
  return record("permute", out, {a}, [inverse](const Tensor& g) { return Grads{in::permute(g, inverse)}; });
}

Tensor expand(const Tensor& a, const Shape& shape) {
  Tensor out = in::expand(a, shape);
  if (!any_requires_grad(a)) return out;
  return record("expand", out, {a}, [s = a.shape()](const Tensor& g) { return Grads{in::sum_to(g, s)}; });
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return subset_view("slice", a, [=](const Tensor& t) { return in::slice(t, dim, start, end, step); });
}

Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  return subset_view("narrow", a, [=](const Tensor& t) { return in::narrow(t, dim, start, length); });
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  return subset_view("select", a, [=](const Tensor& t) { return in::select(t, dim, index); });
}

// Any view of a's elements, overlapping ones included: the gradient of each element of the view is
// added to the element it reads (an index_add over a's elements, so windows that share elements, as
// unfold's do, accumulate).
Tensor as_strided(const Tensor& a, const Shape& shape, const Strides& strides, int64_t offset) {
  LOCKSTEP_CHECK(a.defined(), "as_strided: got an undefined tensor");
  Tensor base = in::contiguous(a);  // the geometry below is relative to a's own row-major elements
  Tensor out = in::as_strided(base, shape, strides, base.storage_offset() + offset);
  if (!any_requires_grad(a)) return out;
  return record("as_strided", out, {a}, [s = a.shape(), n = a.numel(), shape, strides, offset](const Tensor& g) {
    TensorOptions io(kInt64, g.device());
    Tensor positions = in::as_strided(arange(std::max<int64_t>(n, 1), io), shape, strides, offset);
    Tensor ga = zeros({n}, {g.dtype(), g.device()});
    in::index_add_(ga, 0, in::reshape(positions, {-1}), in::reshape(g, {-1}));
    return Grads{in::reshape(ga, s)};
  });
}

Tensor unfold(const Tensor& a, int64_t dim, int64_t size, int64_t step) {
  LOCKSTEP_CHECK(a.defined(), "unfold: got an undefined tensor");
  const int64_t d = in::wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "unfold");
  const int64_t n = a.dim() ? a.shape()[d] : 1;
  LOCKSTEP_CHECK(size >= 0 && size <= n && step > 0, "unfold: size ", size, " and step ", step,
                 " do not fit dimension ", dim, " of size ", n);
  // Over a's row-major layout: dimension d becomes the window count, a new last dimension the window.
  Strides st = in::contiguous_strides(a.shape());
  Shape shape = a.shape();
  Strides strides = st;
  if (a.dim() == 0) {
    shape = {};
    strides = {};
  } else {
    shape[d] = (n - size) / step + 1;
    strides[d] = st[d] * step;
  }
  shape.push_back(size);
  strides.push_back(a.dim() ? st[d] : 1);
  return as_strided(a, shape, strides, 0);
}

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  Tensor out = in::cat(ts, dim);
  bool any = false;
  for (const Tensor& t : ts) any = any || any_requires_grad(t);
  if (!any) return out;
  const int64_t d = in::wrap_dim(dim, ts[0].dim(), "cat");
  std::vector<int64_t> sizes;
  std::vector<Dtype> dtypes;
  for (const Tensor& t : ts) {
    sizes.push_back(t.shape()[d]);
    dtypes.push_back(t.dtype());
  }
  return record("cat", out, ts, [d, sizes, dtypes](const Tensor& g) {
    Grads grads;
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(in::to_dtype(in::narrow(g, d, at, sizes[i]), dtypes[i]));
      at += sizes[i];
    }
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  LOCKSTEP_CHECK(!ts.empty(), "stack: expected at least one tensor");
  LOCKSTEP_CHECK(ts[0].defined(), "stack: got an undefined tensor");
  const int64_t d = in::wrap_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < ts.size(); ++i) {
    LOCKSTEP_CHECK(ts[i].defined() && ts[i].shape() == ts[0].shape(), "stack: tensor ", i, " is ",
                   ts[i].defined() ? ts[i].shape() : Shape{}, " but tensor 0 is ", ts[0].shape());
    LOCKSTEP_CHECK(ts[i].device() == ts[0].device(), "stack: tensor ", i, " is on ", ts[i].device(),
                   " but tensor 0 is on ", ts[0].device());
    parts.push_back(unsqueeze(ts[i], d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim) {
  LOCKSTEP_CHECK(a.defined(), "split: got an undefined tensor");
  const int64_t d = in::wrap_dim(dim, a.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    LOCKSTEP_CHECK(s >= 0, "split: negative size in ", sizes);
    total += s;
  }
  LOCKSTEP_CHECK(total == a.shape()[d], "split: sizes ", sizes, " add up to ", total, ", not to dimension ", dim,
                 " of size ", a.shape()[d]);
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(a, d, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  LOCKSTEP_CHECK(a.defined(), "split: got an undefined tensor");
  LOCKSTEP_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  const int64_t n = a.shape()[in::wrap_dim(dim, a.dim(), "split")];
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(a, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  LOCKSTEP_CHECK(a.defined(), "chunk: got an undefined tensor");
  LOCKSTEP_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t n = a.shape()[in::wrap_dim(dim, a.dim(), "chunk")];
  return split(a, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

// Views through select, so the slices' gradients land in one buffer of a's shape (SubsetViewNode).
std::vector<Tensor> unbind(const Tensor& a, int64_t dim) {
  LOCKSTEP_CHECK(a.defined(), "unbind: got an undefined tensor");
  LOCKSTEP_CHECK(a.dim() > 0, "unbind: expected a tensor with at least one dimension, got a scalar");
  const int64_t d = in::wrap_dim(dim, a.dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < a.shape()[d]; ++i) out.push_back(select(a, d, i));
  return out;
}

}  // namespace lockstep
