// The caching allocator (allocator.h) and the memory half of tensor/cuda/cuda.h.
#include "tensor/cuda/allocator.h"

#include <cuda_runtime_api.h>

#include <array>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/check.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda.h"
#include "tensor/cuda/cuda_check.h"

namespace lockstep::cuda::detail {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceMemory {
  std::unordered_map<size_t, std::vector<void*>> free;  // size class -> cached blocks
  size_t allocated = 0;                                  // live bytes
  size_t reserved = 0;                                   // live + cached bytes
};

double mib(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::string mib_str(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", mib(bytes));
  return buf;
}

}  // namespace

struct CachingAllocator::State {
  std::mutex mu;
  std::array<DeviceMemory, kMaxDevices> devices;
  bool shut_down = false;  // after exit's shutdown(), frees go straight to CUDA
};

CachingAllocator::State& CachingAllocator::state() {
  static State* s = new State;  // never destroyed: tensors may be freed by later static destructors
  return *s;
}

CachingAllocator& CachingAllocator::instance() {
  static CachingAllocator* a = new CachingAllocator;
  return *a;
}

size_t CachingAllocator::size_class(size_t n) {
  if (n <= 512) return 512;
  // Eight classes per power of two: [2^k, 2^(k+1)) in steps of 2^k / 8.
  size_t step = std::bit_floor(n) / 8;
  if (step < 512) step = 512;
  return (n + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t nbytes, int device) {
  device = checked_device(device);
  const size_t size = size_class(nbytes);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  DeviceMemory& m = s.devices[device];
  if (auto it = m.free.find(size); it != m.free.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    m.allocated += size;
    return p;
  }
  DeviceGuard guard(device);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  const size_t held = m.reserved, cached = m.reserved - m.allocated;
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    free_cached_locked(device);
    err = cudaMalloc(&p, size);
  }
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    std::string dev_info;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      dev_info = ::lockstep::detail::str_cat("; the device has ", mib_str(free_b), " MiB free of ", mib_str(total_b),
                                             " MiB");
    (void)cudaGetLastError();
    fail("CUDA out of memory: tried to allocate ", mib_str(nbytes), " MiB; lockstep holds ", mib_str(held), " MiB (",
         mib_str(cached), " MiB cached) on cuda:", device, dev_info);
  }
  LOCKSTEP_CUDA_CHECK(err);
  // Return the cache at exit. Registered after the first cudaMalloc, hence after the CUDA runtime's own
  // exit handlers, so it runs before them (exit handlers run in reverse order of registration).
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit([] { CachingAllocator::instance().shutdown(); }); });
  m.reserved += size;
  m.allocated += size;
  return p;
}

void CachingAllocator::deallocate(void* p, size_t nbytes, int device) {
  const size_t size = size_class(nbytes);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  DeviceMemory& m = s.devices[device];
  m.allocated -= size;
  if (s.shut_down) {
    m.reserved -= size;
    (void)cudaFree(p);  // the runtime may already be unloading: nothing to report to
    return;
  }
  m.free[size].push_back(p);
}

// Called with the lock held. cudaFree waits for the device, so no queued kernel still uses a block.
void CachingAllocator::free_cached_locked(int device) {
  DeviceMemory& m = state().devices[device];
  if (m.free.empty()) return;  // never used: do not create a CUDA context on it
  DeviceGuard guard(device);
  for (auto& [size, blocks] : m.free) {
    while (!blocks.empty()) {
      void* p = blocks.back();
      blocks.pop_back();
      m.reserved -= size;
      LOCKSTEP_CUDA_CHECK(cudaFree(p));
    }
  }
}

void CachingAllocator::empty_cache() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (int d = 0; d < device_count(); ++d) free_cached_locked(d);
}

void CachingAllocator::shutdown() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.shut_down = true;
  for (int d = 0; d < kMaxDevices; ++d) {
    DeviceMemory& m = s.devices[d];
    if (m.free.empty()) continue;
    (void)cudaSetDevice(d);
    for (auto& [size, blocks] : m.free)
      for (void* p : blocks) {
        (void)cudaFree(p);  // errors ignored: the CUDA runtime may be shutting down too
        m.reserved -= size;
      }
    m.free.clear();
  }
}

size_t CachingAllocator::allocated(int device) {
  device = checked_device(device);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.devices[device].allocated;
}

size_t CachingAllocator::reserved(int device) {
  device = checked_device(device);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.devices[device].reserved;
}

}  // namespace lockstep::cuda::detail

namespace lockstep::cuda {

// 0 without devices, as in a build without CUDA.
size_t memory_allocated(int device) {
  return device_count() > 0 ? detail::CachingAllocator::instance().allocated(device) : 0;
}
size_t memory_reserved(int device) {
  return device_count() > 0 ? detail::CachingAllocator::instance().reserved(device) : 0;
}
void empty_cache() {
  if (device_count() > 0) detail::CachingAllocator::instance().empty_cache();
}

}  // namespace lockstep::cuda
