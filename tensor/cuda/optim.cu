// Fused optimizer steps on CUDA devices: the optimizer-step table's rows (Adagrad, RMSprop) and
// torch.optim.Adam/AdamW for one parameter in one pass over the
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

// The optimizer-step table's row `rule` (tensor/optim_step.h), an element per thread; null states unused.
template <typename T, typename C = compute_t<T>>
__global__ void optim_kernel(OptimRule rule, T* p, const T* g, T* s0, T* s1, T* s2, int64_t n,
                             lockstep::detail::OptimScalars<C> s) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    C pi = ld(p[i]), a = s0 ? ld(s0[i]) : C(0), b = s1 ? ld(s1[i]) : C(0), c = s2 ? ld(s2[i]) : C(0);
    lockstep::detail::optim_update(rule, pi, ld(g[i]), a, b, c, s);
    p[i] = static_cast<T>(pi);
    if (s0) s0[i] = static_cast<T>(a);
    if (s1) s1[i] = static_cast<T>(b);
    if (s2) s2[i] = static_cast<T>(c);
  }
}

}  // namespace

void CudaBackend::optim_step(OptimRule rule, Tensor& param, const Tensor& grad, std::array<Tensor*, 3> states,
                             const OptimStepArgs& args) {
  OnDevice on(param.device());
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_any_floating(param.dtype(), "optim_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](Tensor* t) { return t && t->defined() ? t->data<T>() : nullptr; };
    LOCKSTEP_LAUNCH("optim_kernel", optim_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), rule,
                    param.data<T>(), grad.data<T>(), ptr(states[0]), ptr(states[1]), ptr(states[2]), n,
                    lockstep::detail::OptimScalars<compute_t<T>>(args));
  });
}

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
