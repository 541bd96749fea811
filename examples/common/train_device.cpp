// A rank's process group and device (train_device.h).
#include "examples/common/train_device.h"

#include <chrono>

#include "distributed/init.h"
#include "tensor/cuda/cuda.h"

namespace lockstep::examples {

void init_process_group(const TrainFlags& f) {
  dist::InitOptions init;
  init.backend = f.backend;
  if (f.timeout_s > 0) init.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  dist::init_process_group(init);
}

Device training_device(const std::string& flag) {
  if (flag == "cuda" || (flag == "auto" && dist::get_backend() == "nccl")) {
    cuda::set_device(dist::get_local_rank());
    return Device::cuda(dist::get_local_rank());
  }
  if (flag == "cpu" || flag == "auto") return Device::cpu();
  return Device::parse(flag);
}

}  // namespace lockstep::examples
