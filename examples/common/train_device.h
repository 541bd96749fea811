// Where a training example's rank runs: its process group, from --backend and --timeout (the rendezvous
// from the launcher's environment, env://), and its device, from --device: "cpu"; "cuda"
// (cuda:LOCAL_RANK, made current); "auto" (cuda:LOCAL_RANK when the process group is nccl, else the
// CPU); or any device name Device::parse reads ("cuda:1").
#pragma once

#include <string>

#include "examples/common/train_flags.h"
#include "tensor/device.h"

namespace lockstep::examples {

// dist::init_process_group with the flags' backend and timeout.
void init_process_group(const TrainFlags& f);

// Call after init_process_group.
Device training_device(const std::string& flag);

}  // namespace lockstep::examples
