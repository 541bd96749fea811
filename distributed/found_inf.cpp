// found_inf_all_reduce: a blocking MAX all-reduce of the scaler's flag.
#include "distributed/found_inf.h"

#include "distributed/init.h"

namespace lockstep::dist {

std::function<void(Tensor& found_inf)> found_inf_all_reduce(std::shared_ptr<ProcessGroup> process_group) {
  return [pg = std::move(process_group)](Tensor& found_inf) {
    const std::shared_ptr<ProcessGroup> group = pg ? pg : default_pg();
    LOCKSTEP_CHECK(group, "GradScaler: found_inf_all_reduce has no process group (call init_process_group)");
    group->all_reduce(found_inf, ReduceOp::MAX, /*async_op=*/false);
  };
}

}  // namespace lockstep::dist
