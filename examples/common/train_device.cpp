#include "examples/common/train_device.h"

#include "distributed/init.h"
#include "tensor/cuda/cuda.h"

namespace lockstep::examples {

Device training_device(const std::string& flag) {
  if (flag == "cuda" || (flag == "auto" && dist::get_backend() == "nccl")) {
    cuda::set_device(dist::get_local_rank());
    return Device::cuda(dist::get_local_rank());
  }
  if (flag == "cpu" || flag == "auto") return Device::cpu();
  return Device::parse(flag);
}

}  // namespace lockstep::examples
