// Sharding: the examples' --shard none|optimizer|full, the one place that knows the three ways they train
// data-parallel, each as PyTorch users write it:
//   none       DistributedDataParallel, and the whole optimizer on every rank;
//   optimizer  DDP (gradient_as_bucket_view) and ZeroRedundancyOptimizer over the same param groups:
//              each rank keeps the optimizer state of its share only (ZeRO-1);
//   full       fully_shard on each given unit (a transformer block), then on the root, and the optimizer
//              over the shards: parameters, gradients and optimizer state 1/W per rank.
// and their checkpoints (--checkpoint, --resume):
//   none, optimizer  save_checkpoint's one file, written by rank 0; ZeRO's state is consolidated to rank
//                    0 first (consolidate_state_dict), so the keys are the whole optimizer's and either
//                    mode resumes the other's checkpoint; loading, each rank keeps its share;
//   full             a sharded checkpoint directory (distributed/fsdp/state_dict.h): each rank writes its
//                    shard of the model and optimizer state, rank 0 the scheduler and position too; it
//                    resumes at any world size.
//
//   Sharding s(mode, model, blocks, groups_of, make_optimizer);   // shards, builds the optimizer
//   optim::LambdaLR scheduler(s.optimizer(), ...);
//   if (s.has_checkpoint(path)) start = s.load(path, {.model = ..., .scheduler = &scheduler}).step + 1;
//   s.wrap(ddp_options);                                          // DDP (not under full), after loading
//   s.zero_grad(); loss_fn(s.forward(x), y).backward(); s.clip_grad_norm_(1.0); s.step();
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/fsdp/fully_shard.h"
#include "distributed/zero_redundancy_optimizer.h"
#include "nn/module.h"
#include "optim/checkpoint.h"
#include "optim/optimizer.h"

namespace lockstep::examples {

// Registers --shard (none, optimizer or full) on `app`.
void add_shard_flag(CLI::App& app, std::string& shard);

class Sharding {
 public:
  // The param groups of a parameter list (any subset of the model's: ZeRO's share, the shards), and an
  // optimizer over groups in that layout (a group may be empty). Every mode builds the same groups, so
  // their state dicts have the same keys.
  using Groups = std::function<std::vector<std::vector<Tensor>>(const std::vector<Tensor>& params)>;
  using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<std::vector<Tensor>> groups)>;

  // Shards `model` (on its device; under full, each of `units` then the model) and builds the optimizer.
  // Collective; throws for a mode that is not none, optimizer or full.
  Sharding(std::string mode, std::shared_ptr<nn::Module> model, const std::vector<std::shared_ptr<nn::Module>>& units,
           const Groups& groups, const MakeOptimizer& make_optimizer);

  const std::string& mode() const { return mode_; }
  // The optimizer schedulers drive and whose lr is logged (under optimizer: ZeRO's local one).
  optim::Optimizer& optimizer();
  // Wraps the model in DDP (none, optimizer; gradient_as_bucket_view under optimizer). Call it after
  // loading a checkpoint, as DDP starts from rank 0's parameters.
  void wrap(dist::DDPOptions options = {});
  dist::DistributedDataParallel* ddp() const { return ddp_.get(); }
  dist::FSDPModule* fsdp_root() { return root_ ? &*root_ : nullptr; }

  // The model's `Tensor forward(const Tensor&)`: through DDP, or through the units' hooks.
  Tensor forward(const Tensor& x);
  void zero_grad();
  // Clips the gradients' global norm (under full, the norm of every rank's shards together).
  void clip_grad_norm_(double max_norm);
  // The optimizer's step (under optimizer: the local step, then the parameters' broadcasts).
  void step();

  // Whether `path` holds this mode's checkpoint (a file; under full, a directory with an index).
  bool has_checkpoint(const std::string& path) const;
  // Writes `what` (model, scheduler, epoch, step, metadata; the optimizer is this one's) to `path`.
  // Collective: every rank calls it.
  void save(const std::string& path, Checkpoint what);
  // Writes the final weights alone under PyTorch's names (rank 0; under full, gathered first). Every rank
  // calls it.
  void save_weights(const std::string& path, int64_t step);
  // Loads `path` into `into` and this optimizer; returns what the checkpoint says (epoch, step,
  // metadata). Every rank calls it; errors name a checkpoint of the other kind.
  Checkpoint load(const std::string& path, Checkpoint into);

 private:
  std::string mode_;
  std::shared_ptr<nn::Module> model_;
  std::optional<dist::FSDPModule> root_;
  std::optional<dist::ZeroRedundancyOptimizer> zero_;
  std::unique_ptr<optim::Optimizer> whole_;  // none, full
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
};

}  // namespace lockstep::examples
