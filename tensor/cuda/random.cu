// Random fills on a CUDA device: each thread draws its own element by Philox from (seed, counter + i)
// (tensor/philox.h), so a uniform or normal tensor, dropout mask or bernoulli sample is made where it is
// used, with no host draws and no copy. A bfloat16 or float16 element is the float32 one computed the
// same way and rounded once (PyTorch draws its 16-bit fills in float too), so a 16-bit fill equals the
// float32 fill rounded (but for uniform's upper bound, below).
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/philox.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

template <typename T, typename C = compute_t<T>>
__device__ inline C draw(uint64_t seed, uint64_t counter, int64_t i) {
  return lockstep::detail::philox_uniform<C>(seed, counter + static_cast<uint64_t>(i));
}

// A 16-bit value that rounds up to high (u within 2^-9 of 1 for rand() in bfloat16) becomes low, as
// PyTorch's uniform_ keeps [low, high); float32 and float64 store what the CPU backend's uniform does.
template <typename T, typename C = compute_t<T>>
__global__ void uniform_kernel(T* out, int64_t n, C low, C width, C high, uint64_t seed, uint64_t counter) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    const T v = static_cast<T>(low + width * draw<T>(seed, counter, i));
    if constexpr (std::is_same_v<T, C>)
      out[i] = v;
    else
      out[i] = static_cast<C>(v) == high ? static_cast<T>(low) : v;
  }
}

// mean + std * z in the compute dtype, rounded once to T (so a 16-bit randn is the float32 one rounded).
template <typename T, typename C = compute_t<T>>
__global__ void normal_kernel(T* out, int64_t n, C mean, C std, uint64_t seed, uint64_t counter) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    out[i] = static_cast<T>(mean + std * lockstep::detail::philox_normal<C>(seed, counter + static_cast<uint64_t>(i)));
  }
}

// Element i kept (scale) where its draw is at least p, as dropout's rand(...) >= p.
template <typename T, typename C = compute_t<T>>
__global__ void dropout_mask_kernel(T* out, int64_t n, C p, C scale, uint64_t seed, uint64_t counter) {
  LOCKSTEP_GRID_STRIDE(i, n) { out[i] = static_cast<T>(draw<T>(seed, counter, i) >= p ? scale : C(0)); }
}

// Element i is 1 where its draw is below p[i] (p read at 16 bits, compared in float32).
template <typename T, typename C = compute_t<T>>
__global__ void bernoulli_kernel(T* out, const T* p, int64_t n, uint64_t seed, uint64_t counter) {
  LOCKSTEP_GRID_STRIDE(i, n) { out[i] = static_cast<T>(draw<T>(seed, counter, i) < ld(p[i]) ? C(1) : C(0)); }
}

}  // namespace

// Runs launch(type_tag<T>, on, n) for out's floating dtype T unless out is empty.
template <typename Launch>
static void launch_random(Tensor& out, const char* op, Launch&& launch) {
  OnDevice on(out.device());
  const int64_t n = out.numel();
  if (n > 0) dispatch_any_floating(out.dtype(), op, [&](auto tag) { launch(tag, on, n); });
}

void CudaBackend::uniform(Tensor& out, double low, double high, uint64_t seed, uint64_t counter) {
  launch_random(out, "uniform", [&](auto tag, OnDevice& on, int64_t n) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    LOCKSTEP_LAUNCH("uniform_kernel", uniform_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), out.data<T>(), n,
                    static_cast<C>(low), static_cast<C>(high - low), static_cast<C>(high), seed, counter);
  });
}

void CudaBackend::normal(Tensor& out, double mean, double std, uint64_t seed, uint64_t counter) {
  launch_random(out, "normal", [&](auto tag, OnDevice& on, int64_t n) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    LOCKSTEP_LAUNCH("normal_kernel", normal_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), out.data<T>(), n,
                    static_cast<C>(mean), static_cast<C>(std), seed, counter);
  });
}

void CudaBackend::dropout_mask(Tensor& out, double p, uint64_t seed, uint64_t counter) {
  launch_random(out, "dropout_mask", [&](auto tag, OnDevice& on, int64_t n) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    LOCKSTEP_LAUNCH("dropout_mask_kernel", dropout_mask_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(),
                    out.data<T>(), n, static_cast<C>(p), static_cast<C>(1.0 / (1.0 - p)), seed, counter);
  });
}

void CudaBackend::bernoulli(Tensor& out, const Tensor& p, uint64_t seed, uint64_t counter) {
  launch_random(out, "bernoulli", [&](auto tag, OnDevice& on, int64_t n) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("bernoulli_kernel", bernoulli_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(),
                    out.data<T>(), p.data<T>(), n, seed, counter);
  });
}

}  // namespace lockstep::cuda::detail
