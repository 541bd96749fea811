// SyncBatchNorm's link to the default process group: linking this file fills
// nn::sync_batch_norm_comm() (nn/normalization.h), so nn/ reaches the collectives without including
// distributed/. The statistics are summed over the default group, whose world size is read per call.
#include "distributed/init.h"
#include "nn/normalization.h"

namespace lockstep::dist {
namespace {

const bool registered = [] {
  nn::SyncBatchNormComm& comm = nn::sync_batch_norm_comm();
  comm.world_size = [] { return is_initialized() ? get_world_size() : 1; };
  comm.all_reduce_sum = [](Tensor& t) { all_reduce(t, ReduceOp::SUM); };
  return true;
}();

}  // namespace
}  // namespace lockstep::dist
