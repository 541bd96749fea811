// SyncBatchNorm's reducer over a process group, and handing it to a model's SyncBatchNorm layers.
#include "distributed/sync_batch_norm.h"

#include "common/check.h"
#include "distributed/init.h"

namespace lockstep::dist {

ProcessGroupStatsReducer::ProcessGroupStatsReducer(std::shared_ptr<ProcessGroup> pg) : pg_(std::move(pg)) {
  LOCKSTEP_CHECK(pg_ != nullptr, "SyncBatchNorm: the process group is null");
}

void ProcessGroupStatsReducer::all_reduce_sum(Tensor& t) { pg_->all_reduce(t, ReduceOp::SUM, /*async_op=*/false); }

std::shared_ptr<nn::StatsReducer> stats_reducer(std::shared_ptr<ProcessGroup> pg) {
  if (!pg) {
    LOCKSTEP_CHECK(is_initialized(), "SyncBatchNorm: no process group was given and the default one is not "
                   "initialized; call dist::init_process_group() first, or pass a group");
    pg = default_pg();
  }
  return std::make_shared<ProcessGroupStatsReducer>(std::move(pg));
}

int convert_sync_batchnorm(nn::Module& module, std::shared_ptr<ProcessGroup> pg) {
  std::shared_ptr<nn::StatsReducer> reducer;  // one for all of them, made when the first needs it
  int given = 0;
  module.apply([&](nn::Module& m) {
    auto* bn = dynamic_cast<nn::SyncBatchNormImpl*>(&m);
    if (!bn || bn->reducer()) return;
    if (!reducer) reducer = stats_reducer(pg);
    bn->set_reducer(reducer);
    ++given;
  });
  return given;
}

}  // namespace lockstep::dist
