// 2-D max pooling in the ops layer: checks that the windows fit and the output shape, for the
// backend's fused kernel (indices are positions in x, so the backward is one index_add).
#include <cmath>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

MaxPoolResult max_pool2d(const Tensor& x_in, const MaxPool2dArgs& a) {
  check_defined(x_in, "max_pool2d");
  check_floating(x_in, "max_pool2d");
  LOCKSTEP_CHECK(x_in.dim() >= 2 && a.H == x_in.size(-2) && a.W == x_in.size(-1) &&
                     a.planes * a.H * a.W == x_in.numel(),
                 "max_pool2d: input ", x_in.shape(), " is not ", a.planes, " planes of ", a.H, "x", a.W);
  LOCKSTEP_CHECK(a.kh > 0 && a.kw > 0 && a.sh > 0 && a.sw > 0 && a.dh > 0 && a.dw > 0 && a.OH >= 0 && a.OW >= 0 &&
                     (a.OH == 0 || (a.OH - 1) * a.sh + (a.kh - 1) * a.dh < a.H) &&
                     (a.OW == 0 || (a.OW - 1) * a.sw + (a.kw - 1) * a.dw < a.W),
                 "max_pool2d: windows ", a.kh, "x", a.kw, " (stride ", a.sh, "x", a.sw, ", dilation ", a.dh, "x", a.dw,
                 ") for a ", a.OH, "x", a.OW, " output do not fit a ", a.H, "x", a.W, " input");
  // Both devices pool 16-bit planes as they are (float32 compares).
  const Tensor x = contiguous(x_in);
  Shape s = x.shape();
  s[s.size() - 2] = a.OH;
  s[s.size() - 1] = a.OW;
  MaxPoolResult r{Tensor(s, x.dtype(), x.device()), Tensor(s, kInt64, x.device())};
  // (Indices are positions in x itself, so the backward is one index_add into x's shape.)
  if (r.out.numel() > 0) backend_for(x.device()).max_pool2d(r.out, r.indices, x, a);
  return r;
}

}  // namespace lockstep::internal
