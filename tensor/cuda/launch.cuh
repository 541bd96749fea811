// What the kernel files share: the checked launch, launch geometry, the grid-stride loop, a block-wide
// reduction, scratch memory from the caching allocator and the fused kernels' dtype table.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "tensor/cuda/allocator.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/dtype.h"

namespace lockstep::cuda::detail {

constexpr int kThreads = 256;  // threads per block unless a kernel says otherwise

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// kernel<<<grid, block, 0, stream>>>(args...), then the launch checked: a failed launch (bad
// configuration, no kernel image for this GPU) throws under the kernel's name and the caller's
// file:line. Errors while the kernel runs surface at the next synchronization. Under the CUDA emulator
// (--config=cudaemu, testing/cuda_emu) the kernel is queued to run on the CPU instead.
#define LOCKSTEP_LAUNCH(name, ...) ::lockstep::cuda::detail::launch_kernel(name, __FILE__, __LINE__, __VA_ARGS__)

template <typename... Params, typename... Args>
void launch_kernel(const char* name, const char* file, int line, void (*kernel)(Params...), dim3 grid, dim3 block,
                   cudaStream_t stream, Args&&... args) {
#ifdef LOCKSTEP_CUDA_EMU
  lockstep_emu::launch_kernel(name, kernel, grid, block, 0, stream, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, 0, stream>>>(static_cast<Params>(std::forward<Args>(args))...);
#endif
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, (std::string("launch of ") + name).c_str(), file, line);
}

// Blocks for a grid-stride loop over n elements: one element per thread up to 32 resident blocks per
// SM; beyond that each thread loops.
inline unsigned grid_for(int64_t n, const DeviceContext& ctx, int threads = kThreads) {
  const int64_t cap = int64_t{32} * ctx.sm_count();
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(n, threads), 1, cap));
}

// The smallest power of two >= n, clamped to [32, 256]: a block size for work of width n.
inline int block_for(int64_t n) {
  int b = 32;
  while (b < kThreads && b < n) b *= 2;
  return b;
}

// for (i over [0, n)) spread across the whole grid.
#define LOCKSTEP_GRID_STRIDE(i, n)                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Combines one value per thread across a 1-D block (blockDim.x a power of two, at most kThreads) and
// returns the result to every thread. `smem` holds blockDim.x values.
template <typename Acc, typename Combine>
__device__ Acc block_reduce(Acc v, Combine combine, Acc* smem) {
  const unsigned t = threadIdx.x;
  smem[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) smem[t] = combine(smem[t], smem[t + s]);
    __syncthreads();
  }
  Acc r = smem[0];
  __syncthreads();  // smem may be reused right after
  return r;
}

// Device memory for the duration of one op. Returning it to the cache right after queuing the kernels
// that use it is safe: the next user of the block is queued on the same stream, after them.
class Scratch {
 public:
  Scratch(size_t nbytes, int device)
      : nbytes_(nbytes), device_(device), ptr_(CachingAllocator::instance().allocate(nbytes, device)) {}
  ~Scratch() { CachingAllocator::instance().deallocate(ptr_, nbytes_, device_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  size_t nbytes_;
  int device_;
  void* ptr_;
};

// The fused kernels' dtypes, one row each: float32, float64, and bfloat16 and float16, which a kernel
// reads and writes at 16 bits and computes in compute_t<T> (float32), rounding each output once, as
// PyTorch's CUDA kernels do; no float32 copy of a 16-bit tensor is made. `op` names the caller.
template <typename Fn>
decltype(auto) dispatch_any_floating(Dtype d, const char* op, Fn&& fn) {
  switch (d) {
    case Dtype::Float32: return fn(type_tag<float>{});
    case Dtype::Float64: return fn(type_tag<double>{});
    case Dtype::BFloat16: return fn(type_tag<BFloat16>{});
    case Dtype::Float16: return fn(type_tag<Float16>{});
    default: fail(op, ": expected a floating tensor (float32, float64, bfloat16 or float16), got ", dtype_name(d));
  }
}

// Element v in the type its kernel computes in (compute_t<T>: float32 for bfloat16 and float16).
template <typename T>
__device__ inline compute_t<T> ld(const T& v) {
  return static_cast<compute_t<T>>(v);
}

}  // namespace lockstep::cuda::detail
