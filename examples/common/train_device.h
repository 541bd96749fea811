// The device a training example's rank runs on, from its --device flag: "cpu"; "cuda" (cuda:LOCAL_RANK,
// made current); "auto" (cuda:LOCAL_RANK when the process group is nccl, else the CPU); or any device
// name Device::parse reads ("cuda:1"). Call after init_process_group.
#pragma once

#include <string>

#include "tensor/device.h"

namespace lockstep::examples {

Device training_device(const std::string& flag);

}  // namespace lockstep::examples
