// What nvcc gives a .cu file, for the CUDA emulator: the runtime API plus the device-side language
// (qualifiers, thread coordinates, __syncthreads, atomics). A .cu file compiled by the host compiler
// against this header runs its kernels on the CPU, one fiber per GPU thread (see kernel.cpp for the
// model and what it checks). Only the runtime's behaviour is emulated: the device-code language rules
// (no host-only calls or exceptions in kernels, CUDA's overload sets) are checked by nvcc alone.
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
// worker), and blocks run one after another, so a thread_local static serves. Unlike a GPU's, it is
// zero the first time a worker runs the kernel and keeps its values between blocks and launches after
// that: a kernel that reads shared memory before writing it is not caught here.
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

// Queues run(args) on `stream` as a kernel of grid x block threads (kernel.cpp); destroy(args) frees
// the arguments. Checks the configuration as CUDA does (cudaErrorInvalidConfiguration through
// cudaGetLastError), the stream's device, and that each of the kernel's pointer arguments (`pointers`)
// is null or memory the kernel's device can reach (else a device fault, as an illegal address).
void launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, void (*run)(void*),
            void* args, void (*destroy)(void*), const void* const* pointers, size_t n_pointers);

// kernel(args...) with arguments converted to the kernel's parameter types and copied at launch, as
// CUDA copies kernel parameters.
template <typename... Params, typename... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
  using Call = std::pair<void (*)(Params...), std::tuple<std::decay_t<Params>...>>;
  auto* call = new Call(kernel, std::tuple<std::decay_t<Params>...>(static_cast<Params>(std::forward<Args>(args))...));
  const void* pointers[sizeof...(Params) + 1] = {};
  size_t n_pointers = 0;
  std::apply(
      [&](const auto&... a) {
        (
            [&] {
              if constexpr (std::is_pointer_v<std::decay_t<decltype(a)>>) pointers[n_pointers++] = a;
            }(),
            ...);
      },
      call->second);
  launch(
      name, grid, block, shared_bytes, stream,
      [](void* p) {
        auto* c = static_cast<Call*>(p);
        std::apply(c->first, c->second);  // each thread gets the same copied arguments, as on a GPU
      },
      call, [](void* p) { delete static_cast<Call*>(p); }, pointers, n_pointers);
}

}  // namespace lockstep_emu

inline void __syncthreads() { lockstep_emu::syncthreads(); }

// Atomics: real ones (std::atomic_ref), since kernels on two streams run on two worker threads. Only
// CUDA's overloads exist, so code that would not compile under nvcc (atomicAdd on int64_t, say) does
// not compile here either.
namespace lockstep_emu {
template <typename T>
inline T atomic_add(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
template <typename T>
inline T atomic_cas(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;  // the old value either way
}
}  // namespace lockstep_emu
inline int atomicAdd(int* a, int v) { return lockstep_emu::atomic_add(a, v); }
inline unsigned atomicAdd(unsigned* a, unsigned v) { return lockstep_emu::atomic_add(a, v); }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return lockstep_emu::atomic_add(a, v);
}
inline float atomicAdd(float* a, float v) { return lockstep_emu::atomic_add(a, v); }
inline double atomicAdd(double* a, double v) { return lockstep_emu::atomic_add(a, v); }
inline int atomicCAS(int* a, int compare, int v) { return lockstep_emu::atomic_cas(a, compare, v); }
inline unsigned atomicCAS(unsigned* a, unsigned compare, unsigned v) { return lockstep_emu::atomic_cas(a, compare, v); }
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long compare, unsigned long long v) {
  return lockstep_emu::atomic_cas(a, compare, v);
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short compare, unsigned short v) {
  return lockstep_emu::atomic_cas(a, compare, v);
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
