// Reducer: DistributedDataParallel's gradient synchronisation (c10d's Reducer). Parameters are
// grouped into flat buckets in reverse registration order (roughly the order backward produces their
// gradients): a small first bucket so communication starts early, then buckets of up to
// bucket_cap_mb. A post-accumulate hook on each parameter copies its gradient into its bucket; when a
// bucket is full and every earlier bucket has been launched, its all-reduce starts asynchronously,
// so communication overlaps the rest of backward. A callback at the end of backward waits for every
// bucket, in order, and writes the averaged gradients back. A communication hook (comm_hooks.h), where
// registered, replaces the bucket's average-and-all-reduce.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/comm_hooks.h"
#include "distributed/process_group.h"
#include "tensor/tensor.h"

namespace lockstep::dist {

struct ReducerOptions {
  double bucket_cap_mb = 25;
  double first_bucket_cap_mb = 1;  // PyTorch's _DEFAULT_FIRST_BUCKET_BYTES
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
};

class Reducer {
 public:
  // `params` in registration order with their names (for error messages).
  Reducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<ProcessGroup> pg, ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // While false (DDP's no_sync), gradients accumulate locally and nothing is communicated.
  void set_require_sync(bool sync) { require_sync_ = sync; }
  bool require_sync() const { return require_sync_; }

  // Replaces the all-reduce of each bucket with hook(bucket) (DistributedDataParallel::register_comm_hook).
  // Once, before the first backward.
  void register_comm_hook(CommHook hook);

  // Bucket layout: parameter indices (registration order) per bucket, in launch order.
  std::vector<std::vector<size_t>> bucket_indices() const;

  // Seconds the last synchronised backward spent at its end waiting for bucket all-reduces still in
  // flight: the communication that backward did not hide. 0 before the first.
  double last_wait_seconds() const { return last_wait_seconds_; }

 private:
  struct Slot {
    size_t param;    // index into params_
    size_t bucket;
    int64_t offset;  // in elements, within the bucket
  };
  struct Bucket {
    Tensor flat;                  // all of the bucket's gradients, back to back
    std::vector<size_t> slots;    // indices into slots_
    size_t pending = 0;           // gradients not yet copied in during this backward
    std::shared_ptr<Work> work;   // the in-flight all-reduce
    std::shared_ptr<Future> future;  // or the comm hook's result
  };

  void build_buckets();
  GradBucket grad_bucket(size_t index) const;
  void on_gradient_ready(size_t slot);
  void launch_ready_buckets();
  void finalize();
  void reset_for_backward();

  std::vector<std::pair<std::string, Tensor>> params_;
  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions options_;
  std::vector<Slot> slots_;       // one per parameter
  std::vector<Bucket> buckets_;
  std::vector<uint64_t> hooks_;
  CommHook comm_hook_;            // empty: average and all-reduce
  std::vector<bool> ready_;       // per parameter, during the current backward
  size_t next_to_launch_ = 0;
  uint64_t pass_ = 0;             // the backward pass the buckets are filling for
  bool require_sync_ = true;
  double last_wait_seconds_ = 0;
};

}  // namespace lockstep::dist
