// The training loop the image classifiers (cnn_fashion, resnet) share: resuming mid-epoch from a
// checkpoint, then per step zero_grad, cross-entropy through DDP (or fully_shard's hooks: --shard),
// backward, step and the scheduler; a
// metrics record (global loss, lr, samples/s; the global test accuracy at epoch ends) every
// `log_every` steps, a checkpoint with it (each rank's partial epoch sums, so a resumed run's epoch loss
// is the uninterrupted one's), and the final weights alone (--save).
#pragma once

#include <cstdint>
#include <string>

#include "data/api.h"
#include "distributed/ddp.h"
#include "examples/common/sharding.h"
#include "examples/common/train_flags.h"
#include "nn/module.h"
#include "optim/checkpoint.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace lockstep::examples {

struct ClassifierRun {
  Sharding& sharding;                // --shard: DDP, ZeRO or fully_shard, wrapped; its checkpoints
  nn::Module& model;                 // the wrapped model, for evaluation
  optim::Optimizer& opt;             // sharding.optimizer(), whose lr is logged
  optim::LRScheduler* scheduler;     // stepped every optimizer step; may be null
  Checkpoint& state;                 // model, optimizer and scheduler set: what --checkpoint writes
  data::DataLoader& train_loader;
  data::DataLoader& test_loader;     // a DistributedSampler without shuffle
  int64_t test_size;
  const TrainFlags& flags;           // checkpoint, resume, save, metrics, plot
  std::string title;                 // the plot's
  int64_t log_every;
  int64_t total_steps;
  Device device;
  // When set, the global generator is seeded from (seed, step, rank) before every step, so dropout's
  // masks of a resumed run are the uninterrupted run's.
  bool reseed_each_step = false;
  uint64_t seed = 0;
};

// Where --resume (or, for a restarted job, --checkpoint when it exists) leaves off: the optimizer steps
// done, and this rank's loss and sample sums over the epoch so far; zeros for a fresh run. Loads the
// checkpoint into `state` and the sharding's optimizer (call it before Sharding::wrap: DDP broadcasts rank
// 0's parameters).
struct ResumePoint {
  int64_t step = 0;
  double epoch_loss = 0, epoch_seen = 0;
};
ResumePoint resume_classifier(Sharding& sharding, Checkpoint& state, const TrainFlags& flags,
                              int64_t steps_per_epoch);

// Trains from `from` to run.total_steps, then writes --save on rank 0.
void train_classifier(ClassifierRun& run, ResumePoint from);

}  // namespace lockstep::examples
