// softmax and log_softmax in the ops layer, forward and backward: checks and the [outer, n, inner]
// view the backend's fused softmax kernels take. The CPU's kernels take bfloat16 and float16 rows as they
// are (computed in float32); along a middle dimension, 16-bit tensors run on float32 copies. CUDA's
// kernels take 16-bit tensors as they are along any dimension.
#include <cmath>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {
// Whether the backend's kernel takes t along this dimension: every backend along the last one (inner 1),
// along the others where it supports Capability::kSoftmaxAnyDim for t's dtype.
bool rows_kernel(const Tensor& t, int64_t inner) {
  return inner == 1 || supports(t.device(), Capability::kSoftmaxAnyDim, t.dtype());
}
}  // namespace

Tensor softmax(const Tensor& a_in, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(a_in, name);
  check_floating(a_in, name);
  Tensor a = contiguous(a_in.dim() == 0 ? view(a_in, {1}) : a_in);
  int64_t d = wrap_dim(dim, a.dim(), name), outer, n, inner;
  split_dim(a.shape(), d, outer, n, inner);
  if (is_reduced_floating_point(a.dtype()) && !rows_kernel(a, inner))
    return to_dtype(softmax(to_dtype(a_in, kFloat32), dim, log), a_in.dtype());
  Tensor out(a_in.shape(), a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).softmax(out, a, outer, n, inner, log);
  return out;
}

Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax(a, dim, true); }

Tensor softmax_backward(const Tensor& grad_out, const Tensor& output, int64_t dim, bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  LOCKSTEP_CHECK(grad_out.shape() == output.shape(), name, ": gradient ", grad_out.shape(), " does not match output ",
                 output.shape());
  Tensor g = contiguous(to_dtype(grad_out, output.dtype())), y = contiguous(output);
  if (y.dim() == 0) g = view(g, {1}), y = view(y, {1});
  int64_t d = wrap_dim(dim, y.dim(), name), outer, n, inner;
  split_dim(y.shape(), d, outer, n, inner);
  if (is_reduced_floating_point(y.dtype()) && !rows_kernel(y, inner))
    return to_dtype(softmax_backward(to_dtype(grad_out, kFloat32), to_dtype(output, kFloat32), dim, log),
                    output.dtype());
  Tensor gi(output.shape(), y.dtype(), y.device());
  if (gi.numel()) backend_for(y.device()).softmax_backward(gi, g, y, outer, n, inner, log);
  return gi;
}

}  // namespace lockstep::internal
