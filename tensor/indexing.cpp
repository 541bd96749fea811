// Indexing in the ops layer: index_select/index_add along a dimension, gather/scatter_add/scatter_,
// cat/stack (copies into views of the result) and sort/topk. Index tensors are int64; an index out of range is
// an error naming the op, the index and the bound (raised by the kernel, which sees the values).
// 16-bit tensors go to the kernels as they are on both devices: index_select and gather move their
// elements, sort compares them in float32, and the adds (index_add_, scatter_add_) into a 16-bit
// destination compute each add in float32 and round it, so a repeated index rounds once per add
// (PyTorch's rule on both of its devices).
#include <algorithm>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

void check_index(const Tensor& index, const Tensor& a, const char* op) {
  check_defined(index, op);
  LOCKSTEP_CHECK(index.dtype() == kInt64, op, ": expected an int64 index, got ", index.dtype());
  LOCKSTEP_CHECK(index.device() == a.device(), op, ": index on ", index.device(), " but tensor on ", a.device());
}
}  // namespace

Tensor index_select(const Tensor& a_in, int64_t dim, const Tensor& index_in) {
  check_defined(a_in, "index_select");
  check_defined(index_in, "index_select");
  // An int32 index is taken as PyTorch's index_select takes it (token ids are often stored so).
  const Tensor index = index_in.dtype() == kInt32 ? to_dtype(index_in, kInt64) : index_in;
  check_index(index, a_in, "index_select");
  LOCKSTEP_CHECK(index.dim() <= 1, "index_select: expected a 1-D index, got ", index.shape());
  LOCKSTEP_CHECK(a_in.dim() >= 1, "index_select: cannot index a 0-D tensor");
  Tensor a = contiguous(a_in), idx = contiguous(index);
  const int64_t d = wrap_dim(dim, a.dim(), "index_select");
  int64_t outer, n, inner;
  split_dim(a.shape(), d, outer, n, inner);
  Shape s = a.shape();
  s[d] = idx.numel();
  Tensor out(s, a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).index_select(out, a, idx, outer, n, inner);
  return out;
}

Tensor index_select(const Tensor& a, const Tensor& index) { return index_select(a, 0, index); }

void index_add_(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src_in) {
  check_defined(out, "index_add_");
  check_defined(src_in, "index_add_");
  check_index(index, out, "index_add_");
  LOCKSTEP_CHECK(index.dim() <= 1, "index_add_: expected a 1-D index, got ", index.shape());
  LOCKSTEP_CHECK(out.dim() >= 1, "index_add_: cannot index a 0-D tensor");
  const int64_t d = wrap_dim(dim, out.dim(), "index_add_");
  Shape want = out.shape();
  want[d] = index.numel();
  LOCKSTEP_CHECK(src_in.shape() == want, "index_add_: source ", src_in.shape(), " with index ", index.shape(),
                 " does not fit into ", out.shape(), " along dimension ", dim, " (expected ", want, ")");
  LOCKSTEP_CHECK(src_in.device() == out.device(), "index_add_: source on ", src_in.device(), " but tensor on ",
                 out.device());
  if (!src_in.numel()) return;
  if (!out.is_contiguous()) {  // the kernel adds into a contiguous tensor
    Tensor tmp = contiguous(out);
    index_add_(tmp, d, index, src_in);
    copy_(out, tmp);
    return;
  }
  Tensor src = contiguous(to_dtype(src_in, out.dtype()));
  int64_t outer, n, inner;
  split_dim(out.shape(), d, outer, n, inner);
  backend_for(out.device()).index_add(out, contiguous(index), src, outer, n, inner);
}

void index_add_(Tensor& out, const Tensor& index, const Tensor& src) { index_add_(out, 0, index, src); }

// gather/scatter_add take index of a's rank, its sizes no larger than a's (PyTorch's rule); a is
// narrowed to index's sizes outside `dim` so the kernels see matching [outer, *, inner] layouts.
static Tensor narrow_to(const Tensor& a, const Tensor& index, int64_t d, const char* op) {
  LOCKSTEP_CHECK(index.dim() == a.dim(), op, ": index ", index.shape(), " must have as many dimensions as ",
                 a.shape());
  Tensor r = a;
  for (int64_t k = 0; k < a.dim(); ++k) {
    if (k == d) continue;
    LOCKSTEP_CHECK(index.shape()[k] <= a.shape()[k], op, ": index ", index.shape(), " is larger than ", a.shape(),
                   " in dimension ", k);
    if (index.shape()[k] != a.shape()[k]) r = narrow(r, k, 0, index.shape()[k]);
  }
  return r;
}

Tensor gather(const Tensor& a_in, int64_t dim, const Tensor& index) {
  check_defined(a_in, "gather");
  check_index(index, a_in, "gather");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(a_in.dim(), 1), "gather");
  Tensor a = contiguous(narrow_to(a_in, index, d, "gather"));
  Tensor idx = contiguous(index);
  Tensor out(idx.shape(), a.dtype(), a.device());
  if (!out.numel()) return out;
  int64_t outer, n, inner;
  split_dim(a.shape(), d, outer, n, inner);
  backend_for(a.device()).gather(out, a, idx, outer, n, inner);
  return out;
}

namespace {
// scatter_add_ and scatter_: checks, then `run(target, idx, src, outer, n, inner)` on contiguous
// [outer, *, inner] layouts: a contiguous tensor of out's dtype narrowed to index's sizes outside dim,
// src converted to out's dtype and narrowed to index's sizes.
template <typename Run>
void scatter_into(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src_in, const char* op, Run run) {
  check_defined(out, op);
  check_defined(src_in, op);
  check_index(index, out, op);
  LOCKSTEP_CHECK(src_in.dim() == index.dim(), op, ": source ", src_in.shape(), " and index ", index.shape(),
                 " differ in rank");
  for (int64_t k = 0; k < index.dim(); ++k)
    LOCKSTEP_CHECK(index.shape()[k] <= src_in.shape()[k], op, ": index ", index.shape(),
                   " is larger than source ", src_in.shape(), " in dimension ", k);
  LOCKSTEP_CHECK(src_in.device() == out.device(), op, ": source on ", src_in.device(), " but tensor on ",
                 out.device());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(out.dim(), 1), op);
  if (!index.numel()) return;
  Tensor work = out.is_contiguous() ? out : contiguous(out);
  Tensor target = narrow_to(work, index, d, op);
  Tensor src = to_dtype(src_in, work.dtype());
  for (int64_t k = 0; k < index.dim(); ++k)
    if (src.shape()[k] != index.shape()[k]) src = narrow(src, k, 0, index.shape()[k]);
  src = contiguous(src);
  // An index that repeats along every dimension after d (a graph's edge targets expanded over the
  // features, [edges, features] from [edges, 1]) goes to the kernels one entry per row: not copied out
  // to src's size, read once per row of inner elements.
  const Tensor rows = row_index(index, d);
  Tensor idx = contiguous(rows.defined() ? rows : index);
  int64_t outer, n, inner;
  if (target.is_contiguous()) {
    split_dim(target.shape(), d, outer, n, inner);
    run(target, idx, src, outer, n, inner);
  } else {
    Tensor t = contiguous(target);
    split_dim(t.shape(), d, outer, n, inner);
    run(t, idx, src, outer, n, inner);
    copy_(target, t);
  }
  if (!work.is_same(out)) copy_(out, work);
}
}  // namespace

Tensor row_index(const Tensor& index, int64_t dim) {
  if (dim + 1 >= index.dim()) return Tensor();
  Tensor rows = index;
  for (int64_t k = dim + 1; k < index.dim(); ++k) {
    if (index.stride(k) != 0 && index.size(k) != 1) return Tensor();
    rows = narrow(rows, k, 0, std::min<int64_t>(index.size(k), 1));
  }
  return rows;
}

void scatter_add_(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  scatter_into(out, dim, index, src, "scatter_add_",
               [](Tensor& t, const Tensor& idx, const Tensor& s, int64_t outer, int64_t n, int64_t inner) {
                 backend_for(t.device()).scatter_add(t, idx, s, outer, n, inner);
               });
}

void scatter_(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, Scatter op) {
  scatter_into(out, dim, index, src, scatter_name(op),
               [op](Tensor& t, const Tensor& idx, const Tensor& s, int64_t outer, int64_t n, int64_t inner) {
                 backend_for(t.device()).scatter(op, t, idx, s, outer, n, inner);
               });
}

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  LOCKSTEP_CHECK(!ts.empty(), "cat: expected at least one tensor");
  for (size_t i = 0; i < ts.size(); ++i) check_defined(ts[i], "cat");
  const Tensor& f = ts[0];
  LOCKSTEP_CHECK(f.dim() >= 1, "cat: zero-dimensional tensor 0 cannot be concatenated");
  const int64_t d = wrap_dim(dim, f.dim(), "cat");
  Dtype dtype = f.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    bool fits = t.dim() == f.dim() && t.device() == f.device();
    for (int64_t k = 0; fits && k < f.dim(); ++k) fits = k == d || t.shape()[k] == f.shape()[k];
    LOCKSTEP_CHECK(fits, "cat: tensor ", i, " is ", t.shape(), " on ", t.device(), " but tensor 0 is ", f.shape(),
                   " on ", f.device(), " (all sizes but dimension ", dim, " must match)");
    dtype = promote_types(dtype, t.dtype());
    total += t.shape()[d];
  }
  Shape s = f.shape();
  s[d] = total;
  Tensor out(s, dtype, f.device());
  int64_t at = 0;
  for (const Tensor& t : ts) {
    Tensor dst = narrow(out, d, at, t.shape()[d]);
    copy_(dst, t);
    at += t.shape()[d];
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  LOCKSTEP_CHECK(!ts.empty(), "stack: expected at least one tensor");
  check_defined(ts[0], "stack");
  const int64_t d = wrap_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < ts.size(); ++i) {
    check_defined(ts[i], "stack");
    LOCKSTEP_CHECK(ts[i].shape() == ts[0].shape(), "stack: tensor ", i, " is ", ts[i].shape(), " but tensor 0 is ",
                   ts[0].shape());
    parts.push_back(unsqueeze(ts[i], d));
  }
  return cat(parts, d);
}

std::pair<Tensor, Tensor> sort(const Tensor& a_in, int64_t dim, bool descending) {
  check_defined(a_in, "sort");
  if (a_in.dim() == 0) return {clone(a_in), zeros({}, {kInt64, a_in.device()})};
  const int64_t d = wrap_dim(dim, a_in.dim(), "sort");
  // The kernel sorts rows of [rows, n]: the sorted dimension moves last and back.
  Tensor a = contiguous(transpose(a_in, d, a_in.dim() - 1));
  const int64_t n = a.shape().back(), rows = n ? a.numel() / n : 0;
  Tensor values(a.shape(), a.dtype(), a.device()), indices(a.shape(), kInt64, a.device());
  if (a.numel()) backend_for(a.device()).sort(values, indices, a, rows, n, descending);
  return {transpose(values, d, a_in.dim() - 1), transpose(indices, d, a_in.dim() - 1)};
}

std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest) {
  check_defined(a, "topk");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "topk");
  const int64_t n = a.dim() ? a.shape()[d] : 1;
  LOCKSTEP_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is out of range for dimension ", dim, " of size ", n);
  auto [v, i] = sort(a, d, largest);
  if (a.dim() == 0) return {v, i};
  return {narrow(v, d, 0, k), narrow(i, d, 0, k)};
}

}  // namespace lockstep::internal
