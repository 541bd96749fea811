// The examples' --shard modes and their checkpoints (sharding.h).
#include "examples/common/sharding.h"

#include <filesystem>

#include "distributed/fsdp/state_dict.h"
#include "distributed/init.h"
#include "distributed/sync_batch_norm.h"
#include "nn/utils/clip_grad.h"
#include "tensor/safetensors.h"

namespace lockstep::examples {

void add_shard_flag(CLI::App& app, std::string& shard) {
  app.add_option("--shard", shard, "none (DDP), optimizer (ZeRO-1: optimizer state sharded) or full (fully_shard: "
                 "parameters, gradients and optimizer state sharded)")
      ->check(CLI::IsMember({"none", "optimizer", "full"}))
      ->capture_default_str();
}

Sharding::Sharding(std::string mode, std::shared_ptr<nn::Module> model,
                   const std::vector<std::shared_ptr<nn::Module>>& units, const Groups& groups,
                   const MakeOptimizer& make_optimizer)
    : mode_(std::move(mode)), model_(std::move(model)) {
  LOCKSTEP_CHECK(mode_ == "none" || mode_ == "optimizer" || mode_ == "full",
                 "--shard must be none, optimizer or full, got '", mode_, "'");
  if (mode_ == "full") {  // FSDP2's usual wrapping: every block a unit, then the root
    for (const auto& u : units) dist::fully_shard(u);
    root_ = dist::fully_shard(model_);
    dist::convert_sync_batchnorm(*model_);  // what DDP's constructor does for the other modes
  }
  if (mode_ == "optimizer") {
    zero_.emplace(groups(model_->parameters()), make_optimizer);
    LOCKSTEP_CHECK(zero_->optim(), "--shard optimizer: rank ", dist::get_rank(), " owns no parameter (more ranks "
                   "than parameters)");
  } else {
    whole_ = make_optimizer(groups(model_->parameters()));
  }
}

optim::Optimizer& Sharding::optimizer() { return zero_ ? *zero_->optim() : *whole_; }

void Sharding::wrap(dist::DDPOptions options) {
  if (root_) return;
  // Under ZeRO the gradients are read only by the step after the all-reduce: as views of DDP's buckets
  // they are not kept twice (PyTorch's advice for ZeroRedundancyOptimizer, gradient_as_bucket_view=True).
  options.gradient_as_bucket_view = options.gradient_as_bucket_view || zero_.has_value();
  ddp_ = std::make_unique<dist::DistributedDataParallel>(model_, options);
}

Tensor Sharding::forward(const Tensor& x) {
  LOCKSTEP_CHECK(ddp_ || root_, "Sharding::forward: call wrap() first (--shard ", mode_, ")");
  return ddp_ ? ddp_->forward(x) : model_->forward(x);
}

void Sharding::zero_grad() {
  if (zero_) zero_->zero_grad();  // every parameter's gradient: DDP fills them all
  else whole_->zero_grad();
}

void Sharding::clip_grad_norm_(double max_norm) {
  if (root_) dist::clip_grad_norm_(model_->parameters(), max_norm);
  else nn::utils::clip_grad_norm_(model_->parameters(), max_norm);
}

void Sharding::step() {
  if (zero_) zero_->step();
  else whole_->step();
}

bool Sharding::has_checkpoint(const std::string& path) const {
  return root_ ? std::filesystem::exists(path + "/index.json") : std::filesystem::is_regular_file(path);
}

void Sharding::save(const std::string& path, Checkpoint what) {
  if (root_) {
    what.optimizer = whole_.get();
    dist::save_sharded_checkpoint(path, what);
    return;
  }
  optim::StateDict consolidated;
  if (zero_) {
    zero_->consolidate_state_dict(0);  // collective: every rank sends its share to rank 0
    if (dist::get_rank() == 0) consolidated = zero_->state_dict();
    what.optimizer = nullptr;
    what.optimizer_state = &consolidated;
  } else {
    what.optimizer = whole_.get();
  }
  if (dist::get_rank() == 0) save_checkpoint(path, what);
  dist::barrier();  // nobody resumes from a checkpoint rank 0 is still writing
}

void Sharding::save_weights(const std::string& path, int64_t step) {
  if (root_) {
    auto full = dist::full_state_dict(*model_, /*rank0_only=*/true);  // collective: gathered to rank 0
    if (dist::get_rank() == 0) save_safetensors(path, full);
    return;
  }
  if (dist::get_rank() != 0) return;
  Checkpoint weights;  // the model alone: what PyTorch's load_file + load_state_dict reads as it is
  weights.model = model_.get();
  weights.step = step;
  save_checkpoint(path, weights);
}

Checkpoint Sharding::load(const std::string& path, Checkpoint into) {
  const bool dir = std::filesystem::is_directory(path);
  LOCKSTEP_CHECK(dir == root_.has_value(), path, dir ? " is a sharded checkpoint (a directory): --shard full resumes it"
                                                     : " is a one-file checkpoint: --shard none or optimizer resumes it",
                 ", this run has --shard ", mode_);
  if (root_) {
    into.optimizer = whole_.get();
    return dist::load_sharded_checkpoint(path, into);
  }
  if (!zero_) {
    into.optimizer = whole_.get();
    return load_checkpoint(path, into);
  }
  optim::StateDict state;  // the whole optimizer's: each rank keeps its share
  into.optimizer = nullptr;
  into.optimizer_state = &state;
  Checkpoint got = load_checkpoint(path, into);
  zero_->load_state_dict(state);
  return got;
}

}  // namespace lockstep::examples
