// Scans in the ops layer (the rows of tensor/scan_ops.h): PyTorch's argument checks and dtype rules,
// and the contiguous [outer, n, inner] view the kernels take.
#include <algorithm>

#include "tensor/ops.h"

namespace lockstep::internal {

ScanResult scan(Scan op, const Tensor& a_in, int64_t dim, std::optional<Dtype> dtype, bool reverse) {
  const char* name = scan_name(op);
  check_defined(a_in, name);
  const ScanInfo info = scan_info(op);
  // A 0-D tensor scans its one element along "dimension 0" (or -1), as PyTorch allows.
  const int64_t nd = std::max<int64_t>(a_in.dim(), 1);
  LOCKSTEP_CHECK(dim >= -nd && dim < nd, name, ": dimension ", dim, " out of range for a tensor of shape ",
                 a_in.shape());
  Tensor a = a_in;
  if (dtype) a = to_dtype(a, *dtype);
  else if (info.dtypes == OpDtypes::kNumeric && !a.is_floating_point()) a = to_dtype(a, kInt64);
  if (info.dtypes == OpDtypes::kFloating) check_floating(a, name);
  // Every dtype reaches the kernels as it is (16-bit ones computed in float32 by the row's rule).
  const Tensor x = contiguous(a.dim() == 0 ? view(a, {1}) : a);
  ScanResult r{Tensor(x.shape(), x.dtype(), x.device()), Tensor()};
  if (info.index) r.indices = Tensor(x.shape(), kInt64, x.device());
  if (x.numel() > 0) {
    int64_t outer, n, inner;
    split_dim(x.shape(), dim < 0 ? dim + nd : dim, outer, n, inner);
    backend_for(x.device()).scan(op, r.values, r.indices, x, outer, n, inner, reverse);
  }
  if (a_in.dim() == 0) {
    r.values = view(r.values, {});
    if (info.index) r.indices = view(r.indices, {});
  }
  return r;
}

}  // namespace lockstep::internal
