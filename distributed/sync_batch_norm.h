// SyncBatchNorm's collectives: nn::StatsReducer (nn/batch_norm.h) over a process group, and
// convert_sync_batchnorm to hand one to every SyncBatchNorm of a model.
//
//   nn::SyncBatchNorm bn(nn::BatchNormOptions(64), dist::stats_reducer());  // over the default group
//   dist::convert_sync_batchnorm(model, pg);                                 // every one in model, over pg
//
// DistributedDataParallel calls convert_sync_batchnorm with its own group, so a model trained under DDP
// needs neither.
#pragma once

#include <memory>

#include "distributed/process_group.h"
#include "nn/normalization.h"

namespace lockstep::dist {

// Blocking SUM all-reduces on `pg`.
class ProcessGroupStatsReducer : public nn::StatsReducer {
 public:
  explicit ProcessGroupStatsReducer(std::shared_ptr<ProcessGroup> pg);
  int world_size() const override { return pg_->size(); }
  void all_reduce_sum(Tensor& t) override;
  const std::shared_ptr<ProcessGroup>& process_group() const { return pg_; }

 private:
  std::shared_ptr<ProcessGroup> pg_;
};

// A reducer over `pg`; over the default group when null (PyTorch's process_group=None), which must
// then be initialized.
std::shared_ptr<nn::StatsReducer> stats_reducer(std::shared_ptr<ProcessGroup> pg = nullptr);

// Gives every SyncBatchNorm in `module` (itself included) that has no reducer one over `pg` (the
// default group when null); those that have one keep it. Returns how many it gave one. (PyTorch's
// convert_sync_batchnorm also turns BatchNorm layers into SyncBatchNorm; here the model builds
// SyncBatchNorm itself.)
int convert_sync_batchnorm(nn::Module& module, std::shared_ptr<ProcessGroup> pg = nullptr);

}  // namespace lockstep::dist
