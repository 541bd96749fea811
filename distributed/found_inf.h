// found_inf_all_reduce: the GradScaler's found-inf flag agreed across ranks (amp/grad_scaler.h), so that
// every rank skips the same steps and keeps the same scale, as PyTorch's ShardedGradScaler all-reduces
// its found_inf. DDP's averaged gradients are the same on every rank, but a gradient changed after
// backward, no_sync's local gradients or a compressed bucket can make one rank alone see an inf.
//
//   amp::GradScaler scaler({.found_inf_reduction = dist::found_inf_all_reduce()});
#pragma once

#include <functional>
#include <memory>

#include "distributed/process_group.h"
#include "tensor/tensor.h"

namespace lockstep::dist {

// A MAX all-reduce of the flag over `process_group` (null: the default group, looked up at each call).
std::function<void(Tensor& found_inf)> found_inf_all_reduce(std::shared_ptr<ProcessGroup> process_group = nullptr);

}  // namespace lockstep::dist
