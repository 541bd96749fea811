// Reductions in the ops layer (the rows of tensor/reduce_ops.h): argument checks, the [outer, n, inner]
// view the kernels take (made contiguous first), and reductions over several dimensions. The fused
// kernels' ops have a file each: softmax.cpp, layer_norm.cpp, nll_loss.cpp, max_pool2d.cpp.
#include <algorithm>
#include <cmath>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

// One dimension: `a` as [outer, n, inner], reduced over n. The row's dtype rule, output dtype and empty
// value come from tensor/reduce_ops.h.
Tensor reduce(Reduction op, const Tensor& a_in, int64_t dim, bool keepdim, const char* name) {
  check_defined(a_in, name);
  const ReductionInfo info = reduction_info(op);
  if (info.dtypes == OpDtypes::kFloating) check_floating(a_in, name);
  // A sum (product) of bools counts (ands) them, and one of narrower integers is taken, in int64, as
  // PyTorch's (torch.sum of uint8 or int32 is int64).
  if (!is_floating_point(a_in.dtype()) && a_in.dtype() != kInt64 && info.dtypes == OpDtypes::kNumeric)
    return reduce(op, to_dtype(a_in, kInt64), dim, keepdim, name);
  // Both devices reduce 16-bit tensors as they are, by each row's rule (tensor/reduce_ops.h).
  // A 0-D tensor reduces over its one element along "dimension 0", as PyTorch allows.
  Tensor a = a_in.dim() == 0 ? view(a_in, {1}) : contiguous(a_in);
  const int64_t d = wrap_dim(dim, a.dim(), name);
  int64_t outer, n, inner;
  split_dim(a.shape(), d, outer, n, inner);
  LOCKSTEP_CHECK(n > 0 || info.empty_ok, name, ": cannot reduce an empty dimension ", dim, " of shape ",
                 a_in.shape());
  Shape s = a.shape();
  if (keepdim && a_in.dim() > 0) s[d] = 1;
  else s.erase(s.begin() + d);
  Tensor out(s, info.index ? kInt64 : a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (n == 0) fill_(out, info.empty_value);  // as PyTorch: an empty sum is 0, mean NaN, prod 1
  else backend_for(a.device()).reduce(op, out, a, outer, n, inner);
  return out;
}

std::vector<int64_t> reduction_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, std::max<int64_t>(ndim, 1), op));
  std::sort(out.begin(), out.end());
  LOCKSTEP_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dimension repeated in ", dims);
  return out;
}

Shape kept_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape s = shape;
  for (int64_t d : dims)
    if (d < static_cast<int64_t>(s.size())) s[d] = 1;
  return s;
}

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim) {
  check_defined(a, "sum");
  std::vector<int64_t> dims = reduction_dims(dims_in, a.dim(), "sum");
  if (a.dim() == 0) return reduce(Reduction::Sum, a, 0, keepdim, "sum");
  // Every dimension reduced: one flat reduction.
  if (static_cast<int64_t>(dims.size()) == a.dim() && !keepdim)
    return reduce(Reduction::Sum, reshape(a, {a.numel()}), 0, false, "sum");
  Tensor r = a;
  if (is_reduced_floating_point(a.dtype()) && dims.size() > 1) {
    // A 16-bit sum is rounded once (each pass would round to 16 bits), so the reduced dimensions become
    // one reduction: adjacent ones (a bias gradient's [B, T] of [B, T, C]) merge as they are; others are
    // moved last first (a 16-bit copy, not a float32 one).
    if (dims.back() - dims.front() + 1 != static_cast<int64_t>(dims.size())) {
      std::vector<int64_t> order;
      Shape kept;
      int64_t count = 1;
      for (int64_t d = 0; d < a.dim(); ++d)
        if (!std::binary_search(dims.begin(), dims.end(), d)) order.push_back(d), kept.push_back(a.shape()[d]);
      for (int64_t d : dims) order.push_back(d), count *= a.shape()[d];
      Shape flat = kept;
      flat.push_back(count);  // [kept..., reduced]
      Tensor r = reduce(Reduction::Sum, reshape(contiguous(permute(a, order)), flat), -1, false, "sum");
      return keepdim ? reshape(r, kept_shape(a.shape(), dims)) : r;
    }
    Shape merged(a.shape().begin(), a.shape().begin() + dims.front());
    merged.push_back(1);
    for (int64_t d : dims) merged.back() *= a.shape()[d];
    merged.insert(merged.end(), a.shape().begin() + dims.back() + 1, a.shape().end());
    r = reshape(reduce(Reduction::Sum, reshape(a, merged), dims.front(), true, "sum"), kept_shape(a.shape(), dims));
  } else {
    for (size_t i = dims.size(); i-- > 0;) r = reduce(Reduction::Sum, r, dims[i], true, "sum");
  }
  return keepdim ? r : reshape(r, [&] {
    Shape s;
    for (int64_t d = 0; d < a.dim(); ++d)
      if (!std::binary_search(dims.begin(), dims.end(), d)) s.push_back(a.shape()[d]);
    return s;
  }());
}

Tensor sum(const Tensor& a) { return sum(a, std::vector<int64_t>{}, false); }
Tensor sum(const Tensor& a, int64_t dim, bool keepdim) { return reduce(Reduction::Sum, a, dim, keepdim, "sum"); }
Tensor mean(const Tensor& a) {
  check_defined(a, "mean");
  check_floating(a, "mean");
  return reduce(Reduction::Mean, reshape(a, {a.numel()}), 0, false, "mean");
}
Tensor mean(const Tensor& a, int64_t dim, bool keepdim) { return reduce(Reduction::Mean, a, dim, keepdim, "mean"); }
Tensor prod(const Tensor& a) {
  check_defined(a, "prod");
  return reduce(Reduction::Prod, reshape(a, {a.numel()}), 0, false, "prod");
}
Tensor prod(const Tensor& a, int64_t dim, bool keepdim) { return reduce(Reduction::Prod, a, dim, keepdim, "prod"); }
Tensor max(const Tensor& a, int64_t dim, bool keepdim) { return reduce(Reduction::Max, a, dim, keepdim, "max"); }
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return reduce(Reduction::Argmax, a, dim, keepdim, "argmax");
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  LOCKSTEP_CHECK(a.dim() >= static_cast<int64_t>(shape.size()) &&
                     broadcast_shapes(a.shape(), shape, "sum_to") == a.shape(),
                 "sum_to: cannot sum ", a.shape(), " down to ", shape);
  const int64_t lead = a.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && a.shape()[d] != 1)) dims.push_back(d);
  if (dims.empty()) return reshape(a, shape);
  return reshape(sum(a, dims, true), shape);
}

}  // namespace lockstep::internal
