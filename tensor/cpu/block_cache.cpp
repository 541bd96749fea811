// BlockCache (tensor/cpu/block_cache.h).
#include "tensor/cpu/block_cache.h"

#include <cstdlib>

namespace lockstep::cpu {

BlockCache::~BlockCache() { release(); }

void BlockCache::release() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [n, blocks] : free_)
    for (void* p : blocks) std::free(p);
  free_.clear();
  cached_ = 0;
}

void* BlockCache::take(size_t nbytes) {
  if (nbytes < kMinBytes) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.find(nbytes);
  if (it == free_.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  cached_ -= nbytes;
  return p;
}

bool BlockCache::put(void* p, size_t nbytes) {
  if (nbytes < kMinBytes) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_ + nbytes > cap_) return false;
  free_[nbytes].push_back(p);
  cached_ += nbytes;
  return true;
}

size_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace lockstep::cpu
