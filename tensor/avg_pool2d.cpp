// 2-D average pooling of float32, bfloat16 and float16 tensors on the CPU in the ops layer: checks the
// windows and the operands, then runs the CPU's fused kernels (tensor/cpu/avg_pool2d.h), which read and
// write the tensor's dtype with float32 sums instead of summing strided views of a padded (float32)
// copy. float64 and other devices are composed from strided adds in nn/pooling.cpp.
#include <type_traits>

#include "tensor/cpu/avg_pool2d.h"
#include "tensor/cpu/isa.h"
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
  LOCKSTEP_CHECK(avg_pool2d_fused_applies(t), op, ": expected a float32, bfloat16 or float16 CPU tensor, got ",
                 dtype_name(t.dtype()), " on ", t.device());
  LOCKSTEP_CHECK(t.dim() >= 2 && t.size(-2) == h && t.size(-1) == w && planes * h * w == t.numel(), op, ": ", what,
                 " ", t.shape(), " is not ", planes, " planes of ", h, "x", w);
}

}  // namespace

bool avg_pool2d_fused_applies(const Tensor& x) {
  return x.defined() && x.device().is_cpu() && (x.dtype() == kFloat32 || is_reduced_floating_point(x.dtype()));
}

namespace {

// Checks t as [..., h, w] planes, then returns kernel(in, out) on contiguous t and a new tensor whose
// last two sizes are out_h, out_w, run by the kernel of t's dtype.
template <typename Kernel>
Tensor pool_planes(const Tensor& t_in, const AvgPool2dArgs& a, int64_t h, int64_t w, int64_t out_h, int64_t out_w,
                   const char* op, const char* what, Kernel&& kernel) {
  check_planes(t_in, a.planes, h, w, op, what);
  check_windows(a, op);
  const Tensor t = contiguous(t_in);
  Shape s = t.shape();
  s[s.size() - 2] = out_h;
  s[s.size() - 1] = out_w;
  Tensor out(s, t.dtype(), t.device());
  if (out.numel() == 0) return out;
  if (t.dtype() == kFloat32) kernel(t.data<float>(), out.data<float>());
  else if (t.dtype() == kBFloat16) kernel(t.data<BFloat16>(), out.data<BFloat16>());
  else kernel(t.data<Float16>(), out.data<Float16>());
  return out;
}

}  // namespace

Tensor avg_pool2d_fused(const Tensor& x, const AvgPool2dArgs& a) {
  return pool_planes(x, a, a.H, a.W, a.OH, a.OW, "avg_pool2d", "input", [&](const auto* in, auto* out) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(out)>>;
    LOCKSTEP_CPU_ISA_CALL(avg_pool2d_planes<T>, in, out, a);
  });
}

Tensor avg_pool2d_fused_backward(const Tensor& grad_out, const AvgPool2dArgs& a) {
  return pool_planes(grad_out, a, a.OH, a.OW, a.H, a.W, "avg_pool2d_backward", "grad_output",
                     [&](const auto* in, auto* out) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(out)>>;
    LOCKSTEP_CPU_ISA_CALL(avg_pool2d_backward_planes<T>, in, out, a);
  });
}

}  // namespace lockstep::internal
