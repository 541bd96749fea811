// Fused optimizer steps on CUDA devices: torch.optim.Adam/AdamW for one parameter in one pass over the
// parameter, its gradient and its state, each element by tensor/optim_step.h's adam_update (the rule
// the CPU backend runs too). A 16-bit parameter and its state are loaded into float32, updated there and
// rounded once on store (PyTorch's fused optimizers' opmath rule).
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/optim_step.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// vmax is null without amsgrad.
template <typename T, typename C = compute_t<T>>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, lockstep::detail::AdamScalars<C> s) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    C pi = ld(p[i]), mi = ld(m[i]), vi = ld(v[i]);
    C vmaxi = vmax ? ld(vmax[i]) : C(0);
    lockstep::detail::adam_update(pi, ld(g[i]), mi, vi, vmaxi, s);
    p[i] = static_cast<T>(pi);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    if (vmax) vmax[i] = static_cast<T>(vmaxi);
  }
}

}  // namespace

void CudaBackend::adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            Tensor& max_exp_avg_sq, const AdamStepArgs& args) {
  OnDevice on(param.device());
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_any_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* vmax = args.amsgrad ? max_exp_avg_sq.data<T>() : nullptr;
    LOCKSTEP_LAUNCH("adam_kernel", adam_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), param.data<T>(),
                    grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), vmax, n,
                    lockstep::detail::AdamScalars<compute_t<T>>(args));
  });
}

}  // namespace lockstep::cuda::detail
