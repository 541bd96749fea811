// The per-device state of the CUDA backend: its one stream, its properties, its IndexError record,
// and DeviceGuard, which makes a device current for the duration of an op.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>

#include "tensor/cuda/device_error.h"
#include "tensor/device.h"

namespace lockstep::cuda::detail {

// One per visible device, created on first use and kept for the life of the process.
class DeviceContext {
 public:
  explicit DeviceContext(int device);
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  // Non-blocking: it does not wait for the legacy default stream.
  cudaStream_t stream() const { return stream_; }
  int sm_count() const { return sm_count_; }

  // Queues a kernel that may record an IndexError (device_error.h: a bad index or an int64 division by
  // zero): calls launch(record) with the device record, and arms the check at the next synchronize().
  // The lock keeps a concurrent synchronize() from missing a kernel queued from another thread.
  template <typename Launch>
  void launch_checked(Launch&& launch) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
    launch(device_record_);
  }

  // Waits for the stream (or, with whole_device, for every stream on the device), then raises an
  // IndexError recorded since the last synchronization.
  void synchronize(bool whole_device = false);

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  int sm_count_ = 1;
  std::mutex mu_;  // guards the IndexError fields below; held through synchronize()
  IndexError* device_record_ = nullptr;
  IndexError* host_record_ = nullptr;  // pinned
  bool armed_ = false;
};

// The context of cuda device `device`, -1 meaning the calling thread's current device. Throws a clear
// error when the device does not exist (naming how many are visible, or why there are none).
DeviceContext& context(int device);
inline DeviceContext& context(Device d) { return context(d.index); }

// The cuda device index `device` refers to (-1: the current one), checked against device_count().
int checked_device(int device);

// Makes `device` current on this thread until the guard goes out of scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1, device_ = -1;
};

// What every op on a cuda tensor starts with: the tensor's device made current, and its context.
struct OnDevice {
  explicit OnDevice(Device d) : guard(d.index), ctx(context(d.index)) {}
  DeviceGuard guard;
  DeviceContext& ctx;
  cudaStream_t stream() const { return ctx.stream(); }
};

}  // namespace lockstep::cuda::detail
