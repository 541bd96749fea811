// Fused optimizer steps on CUDA devices: torch.optim.Adam/AdamW for one parameter in one pass over the
// parameter, its gradient and its state, each element by tensor/optim_step.h's adam_update (the rule
// the CPU backend runs too).
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/optim_step.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// vmax is null without amsgrad.
template <typename T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, lockstep::detail::AdamScalars<T> s) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    T pi = p[i], mi = m[i], vi = v[i];
    T vmaxi = vmax ? vmax[i] : T(0);
    lockstep::detail::adam_update(pi, g[i], mi, vi, vmaxi, s);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (vmax) vmax[i] = vmaxi;
  }
}

}  // namespace

void CudaBackend::adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            Tensor& max_exp_avg_sq, const AdamStepArgs& args) {
  OnDevice on(param.device());
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* vmax = args.amsgrad ? max_exp_avg_sq.data<T>() : nullptr;
    LOCKSTEP_LAUNCH("adam_kernel", adam_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), param.data<T>(),
                    grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), vmax, n,
                    lockstep::detail::AdamScalars<T>(args));
  });
}

}  // namespace lockstep::cuda::detail
