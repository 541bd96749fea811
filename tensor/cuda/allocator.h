// CachingAllocator: device memory for tensors without a cudaMalloc/cudaFree per tensor.
//
// Requests are rounded up to a size class (at most 1/8 above the request; at least 512 bytes) and
// freed blocks are kept in a free list per (device, size class). A training step allocates the same
// sizes every step, so after the first step every request is a free-list pop. Freed blocks are reused
// without waiting for the device: every op on a device is queued on its one stream, so work queued
// after the reuse runs after the work that used the block before.
//
// When cudaMalloc fails, the device's cached blocks are returned to CUDA and the request is retried
// once; a second failure throws "CUDA out of memory: tried to allocate X MiB; lockstep holds Y MiB (Z
// MiB cached) on cuda:N; ...". Cached blocks are returned to CUDA at exit. Thread-safe.
#pragma once

#include <cstddef>

namespace lockstep::cuda::detail {

class CachingAllocator {
 public:
  static CachingAllocator& instance();

  void* allocate(size_t nbytes, int device);
  // `nbytes` as passed to allocate().
  void deallocate(void* ptr, size_t nbytes, int device);
  // Returns every cached (free) block on every device to CUDA.
  void empty_cache();

  size_t allocated(int device);  // bytes in live blocks (size classes)
  size_t reserved(int device);   // bytes held from CUDA: live plus cached

  static size_t size_class(size_t nbytes);

 private:
  CachingAllocator() = default;
  void shutdown();  // at exit: frees the cache; later frees go straight to cudaFree
  void free_cached_locked(int device);
  struct State;
  State& state();
};

}  // namespace lockstep::cuda::detail
