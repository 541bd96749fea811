// 2-D average pooling through the backend's fused kernels (Backend::avg_pool2d, where it supports
// Capability::kAvgPool2d: on the CPU float32, bfloat16 and float16, read and written in their dtype
// with float32 sums instead of summing strided views of a padded float32 copy). The ops layer checks the
// windows and the operands here; the other dtypes and devices are composed from strided adds in
// nn/pooling.cpp.
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

// Every window starts inside the input or its left/top padding and ends inside the input or its
// right/bottom padding, so each has at least one input cell.
void check_windows(const AvgPool2dArgs& a, const char* op) {
  auto fits = [](int64_t o, int64_t n, int64_t k, int64_t s, int64_t p) {
    return o == 0 || ((o - 1) * s - p < n && (o - 1) * s - p + k > 0);
  };
  LOCKSTEP_CHECK(a.kh > 0 && a.kw > 0 && a.sh > 0 && a.sw > 0 && a.ph >= 0 && a.pw >= 0 && 2 * a.ph <= a.kh &&
                     2 * a.pw <= a.kw && a.OH >= 0 && a.OW >= 0 && a.H > 0 && a.W > 0 &&
                     fits(a.OH, a.H, a.kh, a.sh, a.ph) && fits(a.OW, a.W, a.kw, a.sw, a.pw),
                 op, ": windows ", a.kh, "x", a.kw, " (stride ", a.sh, "x", a.sw, ", padding ", a.ph, "x", a.pw,
                 ") for a ", a.OH, "x", a.OW, " output do not fit a ", a.H, "x", a.W, " input");
}

void check_planes(const Tensor& t, int64_t planes, int64_t h, int64_t w, const char* op, const char* what) {
  check_defined(t, op);
  LOCKSTEP_CHECK(avg_pool2d_fused_applies(t), op, ": the ", t.device(), " backend has no kernel for ",
                 dtype_name(t.dtype()), " (the CPU's pools float32, bfloat16 or float16; the others are composed)");
  LOCKSTEP_CHECK(t.dim() >= 2 && t.size(-2) == h && t.size(-1) == w && planes * h * w == t.numel(), op, ": ", what,
                 " ", t.shape(), " is not ", planes, " planes of ", h, "x", w);
}

}  // namespace

bool avg_pool2d_fused_applies(const Tensor& x) {
  return x.defined() && supports(x.device(), Capability::kAvgPool2d, x.dtype());
}

namespace {

// Checks t as [..., h, w] planes and the windows; returns contiguous t and a new tensor for the result,
// whose last two sizes are out_h, out_w.
std::pair<Tensor, Tensor> planes_and_result(const Tensor& t_in, const AvgPool2dArgs& a, int64_t h, int64_t w,
                                            int64_t out_h, int64_t out_w, const char* op, const char* what) {
  check_planes(t_in, a.planes, h, w, op, what);
  check_windows(a, op);
  Tensor t = contiguous(t_in);
  Shape s = t.shape();
  s[s.size() - 2] = out_h;
  s[s.size() - 1] = out_w;
  return {t, Tensor(s, t.dtype(), t.device())};
}

}  // namespace

Tensor avg_pool2d_fused(const Tensor& x_in, const AvgPool2dArgs& a) {
  auto [x, y] = planes_and_result(x_in, a, a.H, a.W, a.OH, a.OW, "avg_pool2d", "input");
  if (y.numel()) backend_for(x.device()).avg_pool2d(y, x, a);
  return y;
}

Tensor avg_pool2d_fused_backward(const Tensor& grad_out, const AvgPool2dArgs& a) {
  auto [gy, gx] = planes_and_result(grad_out, a, a.OH, a.OW, a.H, a.W, "avg_pool2d_backward", "grad_output");
  if (gx.numel()) backend_for(gy.device()).avg_pool2d_backward(gx, gy, a);
  return gx;
}

}  // namespace lockstep::internal
