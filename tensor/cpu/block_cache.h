// BlockCache: the CPU allocator's reuse of large blocks. A training step frees and re-allocates the
// same large buffers (activations, im2col columns, their gradients: megabytes each) every step. glibc
// hands blocks above its mmap threshold (32 MiB at most) back to the kernel when they are freed, so
// each step page-faulted and zeroed them again: a small CNN's step spent about a fifth of its time in
// the kernel. Freed blocks of at least kMinBytes are kept here, by exact size, up to a cap in all
// (LOCKSTEP_CPU_CACHE_MB, default 1024; 0 turns the cache off), and handed out again for the same size.
// Thread-safe (DataLoader workers allocate too).
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lockstep::cpu {

class BlockCache {
 public:
  static constexpr size_t kMinBytes = size_t(1) << 20;

  explicit BlockCache(size_t cap_bytes) : cap_(cap_bytes) {}
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache();  // frees what it holds

  // A cached block of exactly `nbytes`, or nullptr.
  void* take(size_t nbytes);
  // Keeps `p` (a block of `nbytes` from std::aligned_alloc) for reuse; false when it does not (too
  // small, or the cap reached): the caller frees it.
  bool put(void* p, size_t nbytes);
  size_t cached_bytes() const;
  // Frees every cached block (cpu::empty_cache).
  void release();

 private:
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  const size_t cap_;
};

}  // namespace lockstep::cpu
