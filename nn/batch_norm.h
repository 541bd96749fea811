// The batch-norm function behind BatchNorm1d/2d, SyncBatchNorm and functional::batch_norm: the
// tensor layer's fused kernels (tensor/batch_norm.h) in one autograd node, and the interface through
// which SyncBatchNorm sums its statistics over ranks between the kernels' passes.
#pragma once

#include <memory>
#include <optional>

#include "tensor/tensor.h"

namespace lockstep::nn {

// What SyncBatchNorm needs from the ranks it normalizes over: their number and an in-place, blocking
// SUM all-reduce that every rank calls in the same order. Implemented in distributed/ over a process
// group (dist::ProcessGroupStatsReducer), so that nn/ does not depend on distributed/.
class StatsReducer {
 public:
  virtual ~StatsReducer() = default;
  virtual int world_size() const = 0;
  virtual void all_reduce_sum(Tensor& t) = 0;
};

namespace detail {

struct BatchNormArgs {
  Tensor weight, bias;                                    // [C] or undefined
  Tensor running_mean, running_var, num_batches_tracked;  // any may be undefined
  // Batch statistics, folded into the running ones where defined. Otherwise the running statistics
  // normalize, or the batch's where there are none (track_running_stats false in eval()).
  bool training = true;
  std::optional<double> momentum = 0.1;  // nullopt: cumulative average over num_batches_tracked
  double eps = 1e-5;
  // Batch statistics over all its ranks (SyncBatchNorm): forward all-reduces [sum x, sum x^2, count],
  // backward [sum dy, sum dy * (x - mean)]. Null or a world of one: this rank's batch alone.
  std::shared_ptr<StatsReducer> reducer;
};

// x [N, C, ...]; `who` names the caller in errors. The gradient flows to x, weight and bias (not twice:
// the node's backward is not itself recorded).
Tensor batch_norm(const char* who, const Tensor& x, const BatchNormArgs& args);

}  // namespace detail
}  // namespace lockstep::nn
