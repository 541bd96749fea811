// DistributedDataParallel: wraps a Module so that every rank trains a replica in lockstep, as
// torch.nn.parallel.DistributedDataParallel. Construction checks that all ranks hold the same
// parameters (names and shapes) and broadcasts rank 0's parameters and buffers; backward averages
// gradients across ranks through the Reducer's overlapped, bucketed all-reduce.
//
//   auto ddp = std::make_shared<dist::DistributedDataParallel>(model);   // a module or a holder
//   loss_fn(ddp->forward(x), y).backward();   // .grad now holds the average over ranks
//   optimizer.step();
//
// A module whose forward takes or returns several tensors (a tuple, a pair, a struct) is called through
// forward<M>(args...), M being its type (the Impl of a holder), as PyTorch's ddp(*inputs):
//   auto [logits, loss] = ddp->forward<GPTImpl>(idx, targets);
//   auto [recon, mu, logvar] = ddp->forward<VAEImpl>(x);
#pragma once

#include <memory>
#include <type_traits>
#include <vector>

#include "distributed/comm_hooks.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "nn/module.h"

namespace lockstep::dist {

struct DDPOptions {
  std::vector<int> device_ids = {};  // {local_rank} on a GPU; empty on the CPU (as PyTorch)
  int output_device = -1;        // accepted for PyTorch parity: outputs stay where the module puts them
  double bucket_cap_mb = 25;
  bool broadcast_buffers = true;  // rank 0's buffers are broadcast before every forward
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  double first_bucket_cap_mb = 1;
};

class DistributedDataParallel : public nn::Module {
 public:
  // `process_group` defaults to the one init_process_group created. Every SyncBatchNorm in `module`
  // without a reducer gets one over this group (convert_sync_batchnorm, sync_batch_norm.h).
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options = {},
                                   std::shared_ptr<ProcessGroup> process_group = nullptr);
  // From the module's own type: binds its `Tensor forward(const Tensor&)` (if it has one), so that
  // ddp(x) and a std::shared_ptr<nn::Module> holding the model run it (nn/module.h).
  template <typename M>
    requires(std::is_base_of_v<nn::Module, M> && !std::is_same_v<M, nn::Module>)
  explicit DistributedDataParallel(std::shared_ptr<M> module, DDPOptions options = {},
                                   std::shared_ptr<ProcessGroup> process_group = nullptr)
      : DistributedDataParallel(bound(std::move(module)), std::move(options), std::move(process_group)) {}

  Tensor forward(const Tensor& input);
  // The wrapped module's forward with any arguments and results, as PyTorch's ddp(*inputs).
  template <typename M, typename... Args>
  decltype(auto) forward(Args&&... args) {
    auto* m = module_->as<M>();
    LOCKSTEP_CHECK(m != nullptr, "DistributedDataParallel::forward<M>: the wrapped module is a ", module_->name(),
                   ", not M");
    before_forward();
    return m->forward(std::forward<Args>(args)...);
  }
  // The wrapped model (for evaluation without collectives, or saving its state_dict without the
  // "module." prefix).
  const std::shared_ptr<nn::Module>& module() const { return module_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return pg_; }
  Reducer& reducer() { return *reducer_; }

  // Scope guard: while it lives, backward accumulates gradients locally without communication; the
  // first backward after it synchronises the accumulated gradients.
  class NoSync {
   public:
    explicit NoSync(Reducer& r) : r_(&r), prev_(r.require_sync()) { r.set_require_sync(false); }
    ~NoSync() { r_->set_require_sync(prev_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    Reducer* r_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*reducer_); }

  // Replaces each bucket's average-and-all-reduce with hook(state, bucket), as PyTorch's
  // ddp.register_comm_hook(state, hook) (comm_hooks.h): once, before the first backward, the same hook
  // on every rank. State is copied into the hook (a process group for the default hooks; null: the
  // default group).
  //   ddp.register_comm_hook(pg, dist::default_hooks::bf16_compress_hook);
  template <typename State, typename Hook>
  void register_comm_hook(State state, Hook hook) {
    reducer_->register_comm_hook(
        [state = std::move(state), hook = std::move(hook)](GradBucket& bucket) mutable { return hook(state, bucket); });
  }

 private:
  template <typename M>
  static std::shared_ptr<nn::Module> bound(std::shared_ptr<M> m) {
    if (m) m->template bind_forward<M>();
    return m;
  }
  void before_forward();  // broadcasts rank 0's buffers (broadcast_buffers)
  void verify_same_parameters();
  void broadcast_state(bool parameters);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace lockstep::dist
