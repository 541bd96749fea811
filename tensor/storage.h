// Storage: one allocation on one device, shared by every tensor that views it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/device.h"

namespace lockstep {

class Storage {
 public:
  // Allocates through the device's backend (CPU: aligned malloc; CUDA: the caching allocator).
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Bumped by each public in-place op on a tensor viewing this storage (Tensor::version()); autograd
  // compares it with the value an op saw when it was recorded.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  // Frees the allocation and makes a new one of `nbytes` (contents undefined), as PyTorch's
  // untyped_storage().resize_(n) used by FSDP: tensors viewing this storage, the autograd graph's saved
  // ones included, keep pointing at it, so fully_shard frees a unit's gathered parameters after forward
  // (resize_(0)) and refills them before backward without touching the graph. Touching the elements of
  // a tensor that views a freed storage is the caller's bug.
  void resize_(size_t nbytes);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
};

}  // namespace lockstep
