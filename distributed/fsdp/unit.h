// fsdp::Unit: one fully_shard-ed module's flat parameter buffer and its lifecycle (FSDP2's
// FSDPParamGroup), and the Context its tree of units shares. fully_shard.h states the contract.
//
// Layout: the unit's parameters flattened and concatenated, N elements, padded to W * S (S = ceil(N / W));
// rank r holds elements [r S, (r + 1) S) in `shard` (the parameters' dtype). Gathered, `full` holds all
// W * S in the compute dtype (MixedPrecisionPolicy::param_dtype), and parameter i is the view
// full[offset_i, offset_i + numel_i) in its own shape.
//
// Two explicit states, each changed in one place (FSDP2's ShardedState and TrainingState):
// - ShardState: sharded (each parameter handle is a 1-D view of its part of `shard`), gathering (the
//   all-gather issued: a prefetch, or unshard's own), unsharded (each is a view of `full`). While
//   unsharded, gradients the parameters already had (accumulation across iterations) are parked in a
//   flat [S] tensor and come back, added to the new ones, when resharded.
// - TrainingState, per backward pass: idle, pre-backward (gathered for backward, gradients arriving),
//   post-backward (gradients handed to the reduce-scatter, or kept for accumulation). advance() is the
//   transition; a new backward pass starts idle, so each step runs once per pass however many of the
//   unit's outputs or parameters call it.
//
// Gradients: when backward reaches the unit, each parameter's .grad is set to its part of the unit's flat
// reduce-scatter input [W S] (DDP's gradient_as_bucket_view), so autograd's AccumulateGrad adds into
// the flat buffer in place and no gradient is copied. With a reduce dtype other than the compute dtype
// (or a gradient that arrives without the unit's backward having begun) each is copied in instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/fsdp/fully_shard.h"
#include "distributed/work.h"

namespace lockstep::dist::fsdp {

class Unit;

// The units of one fully_shard-ed tree: their forward order (for prefetching) and the backward pass
// whose end-of-backward callback is queued.
struct Context : std::enable_shared_from_this<Context> {
  std::vector<Unit*> units;  // every unit of the tree, in the order fully_shard made them
  std::vector<Unit*> order;  // forward order, fixed by the first forward
  bool recording = false;
  bool order_fixed = false;
  uint64_t callback_pass = 0;
  // The unit whose reduce-scatter is in flight: at most one, so that the units' full gradients are not
  // all alive at the end of backward (each is waited for before the next unit's flat gradient is
  // allocated: when backward reaches that unit, or at its first gradient under a mixed reduce dtype).
  Unit* reducing = nullptr;
  // Queues finish_backward once per backward pass.
  void ensure_callback();
  void finish_backward();
};

struct FlatEntry {
  std::string name;  // relative to the unit's module
  Tensor param;      // the module's handle
  Shape shape;
  int64_t offset = 0;  // in the flat buffer
  int64_t numel = 0;
};

enum class ShardState : uint8_t { kSharded, kGathering, kUnsharded };
enum class TrainingState : uint8_t { kIdle, kPreBackward, kPostBackward };

class Unit : public std::enable_shared_from_this<Unit> {
 public:
  Unit(nn::Module& module, std::vector<FlatEntry> entries, FSDPOptions options, std::shared_ptr<ProcessGroup> pg);
  // Registers the hooks (needs shared_from_this, so after construction).
  void attach();

  void unshard();        // begin_unshard + wait, then the parameters view `full`
  void begin_unshard();  // issues the all-gather (nothing when unsharded or already issued)
  void reshard();        // the parameters view their shards again; `full`'s storage is freed

  void pre_forward();
  void post_forward(const std::vector<Tensor*>& outputs);
  void pre_backward();
  void on_grad_ready(size_t entry);
  void post_backward();
  void finish_backward();
  void finish_reduce();  // waits for this unit's reduce-scatter and sets the sharded gradients

  bool is_root() const { return !has_parent; }
  nn::Module& module() const { return *module_; }
  ProcessGroup& process_group() const { return *pg_; }
  const std::vector<FlatEntry>& entries() const { return entries_; }
  int64_t shard_numel() const { return shard_numel_; }
  const Tensor& shard() const { return shard_; }
  Dtype dtype() const { return dtype_; }
  // Elements [begin, end) of entry e's flattened parameter that this rank (or `rank`) holds.
  std::pair<int64_t, int64_t> local_range(const FlatEntry& e, int rank = -1) const;
  // Entry e's part of `flat` ([S], this rank's shard layout) as a 1-D view.
  Tensor local_view(const Tensor& flat, const FlatEntry& e) const;

  void set_reshard_after_forward(bool reshard) { options_.reshard_after_forward = reshard; }

  std::shared_ptr<Context> ctx;
  bool has_parent = false;
  bool requires_gradient_sync = true;

 private:
  // The training state's one transition: moves this backward pass's state on to `to` and returns true,
  // or false where the pass is already there or past it. A new pass starts at kIdle, no gradient counted.
  bool advance(TrainingState to);
  void sync_pass();     // starts the new backward pass's state, if one has begun
  void wait_gather();   // kGathering -> kSharded, the gathered buffer complete
  void park_grads();
  Tensor& flat_grad();  // this backward's flat gradient, allocated on first use
  void grads_as_flat_views();
  void take_grad(FlatEntry& e);  // e's gradient into flat_grad_ (unless it is its view already), then freed
  void restore_parked_grads();
  void set_sharded_grads(const Tensor& grad);

  nn::Module* module_;
  std::vector<FlatEntry> entries_;
  FSDPOptions options_;
  std::shared_ptr<ProcessGroup> pg_;
  Dtype dtype_, compute_dtype_, reduce_dtype_;
  Device device_;
  int64_t shard_numel_ = 0;
  int64_t requiring_grad_ = 0;
  Tensor shard_;       // [S], the parameters' dtype: the master copy
  Tensor full_;        // [W S], compute dtype; storage freed while sharded
  Tensor gather_src_;  // the shard cast to the compute dtype, alive until the gather ends
  std::shared_ptr<Work> gather_;  // while kGathering
  ShardState shard_state_ = ShardState::kSharded;
  TrainingState training_ = TrainingState::kIdle;
  uint64_t pass_ = 0;   // the backward pass training_ and ready_ are of
  int64_t ready_ = 0;   // parameters whose gradient this pass has accumulated
  size_t index_ = 0;  // in ctx->order
  Tensor parked_;     // [S] or undefined
  Tensor accumulated_;  // [W S] reduce dtype: full gradients summed without sync
  // [W S] reduce dtype: this backward's gradients, accumulated by autograd straight into views of it
  // (or each copied in, and its own tensor freed, as soon as autograd has accumulated it), so that the
  // unit's gradients are not alive twice.
  Tensor flat_grad_;
  // The reduce-scatter in flight: its output [S] and input [W S].
  std::shared_ptr<Work> reduce_;
  Tensor reduce_out_, reduce_in_;
};

// Every unit in `module`'s tree (module itself included), in tree order.
std::vector<std::shared_ptr<Unit>> units_in(nn::Module& module);

}  // namespace lockstep::dist::fsdp
