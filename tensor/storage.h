// Storage: one allocation on one device, shared by every tensor that views it.
#pragma once

#include <cstddef>
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

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace lockstep
