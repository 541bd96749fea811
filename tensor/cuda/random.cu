// rand() on a CUDA device: each thread draws its own element by Philox from (seed, counter + i)
// (tensor/philox.h), so a random tensor is made where it is used, with no host draws and no copy.
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/philox.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

template <typename T>
__global__ void uniform_kernel(T* out, int64_t n, T low, T width, uint64_t seed, uint64_t counter) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    out[i] = low + width * lockstep::detail::philox_uniform<T>(seed, counter + static_cast<uint64_t>(i));
  }
}

}  // namespace

void CudaBackend::uniform(Tensor& out, double low, double high, uint64_t seed, uint64_t counter) {
  OnDevice on(out.device());
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_floating(out.dtype(), "uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("uniform_kernel", uniform_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), out.data<T>(), n,
                    static_cast<T>(low), static_cast<T>(high - low), seed, counter);
  });
}

}  // namespace lockstep::cuda::detail
