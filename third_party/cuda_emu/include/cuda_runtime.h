// What nvcc gives a .cu file, for the CUDA emulator: the runtime API plus the device-side language
// (qualifiers, thread coordinates, __syncthreads, atomics). A .cu file compiled by the host compiler
// against this header runs its kernels on the CPU, one fiber per GPU thread (see kernel.h for the
// model and what it checks).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Shared memory is one object per block: all fibers of a block run on one OS thread (the stream's
// worker), and blocks run one after another, so a thread_local static is exactly that.
#define __shared__ static thread_local

// Thread coordinates of the fiber running now; set by the emulator before each fiber resumes.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace lockstep_emu {

// Suspends this fiber until every thread of its block has called it (kernel.cpp).
void syncthreads();

// Queues `body` on `stream` as a kernel of grid x block threads (kernel.cpp). Checks the configuration
// as CUDA does (cudaErrorInvalidConfiguration through cudaGetLastError) and the stream's device.
void launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, void (*run)(void*),
            void* args, void (*destroy)(void*));

// kernel(args...) with arguments converted to the kernel's parameter types and copied at launch, as
// CUDA copies kernel parameters.
template <typename... Params, typename... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
  using Call = std::pair<void (*)(Params...), std::tuple<std::decay_t<Params>...>>;
  auto* call = new Call(kernel, std::tuple<std::decay_t<Params>...>(static_cast<Params>(std::forward<Args>(args))...));
  launch(
      name, grid, block, shared_bytes, stream,
      [](void* p) {
        auto* c = static_cast<Call*>(p);
        std::apply(c->first, c->second);  // each thread gets the same copied arguments, as on a GPU
      },
      call, [](void* p) { delete static_cast<Call*>(p); });
}

}  // namespace lockstep_emu

inline void __syncthreads() { lockstep_emu::syncthreads(); }

// Atomics: real ones (std::atomic_ref), since kernels on two streams run on two worker threads.
template <typename T>
inline T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
template <typename T>
inline T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;  // the old value either way
}

// Device math that CUDA puts in the global namespace.
using std::isinf;
using std::isnan;
template <typename T>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
inline T max(T a, T b) {
  return a < b ? b : a;
}
