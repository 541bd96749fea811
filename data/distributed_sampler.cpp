// DistributedSampler (see the header for the rules, which follow PyTorch's source line by line).
#include "data/distributed_sampler.h"

#include <numeric>

#include "data/world.h"
#include "common/check.h"

namespace lockstep::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : dataset_size_(dataset_size), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  LOCKSTEP_CHECK(dataset_size >= 0, "DistributedSampler: the dataset size must be non-negative, got ", dataset_size);
  if (num_replicas == -1 || rank == -1) {
    auto& world = default_world_provider();
    LOCKSTEP_CHECK(world, "DistributedSampler: num_replicas and rank not given and no process group is initialized");
    auto [world_size, world_rank] = world();
    if (num_replicas == -1) num_replicas = world_size;
    if (rank == -1) rank = world_rank;
  }
  LOCKSTEP_CHECK(num_replicas > 0, "DistributedSampler: num_replicas must be positive, got ", num_replicas);
  LOCKSTEP_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: invalid rank ", rank,
                 ", rank should be in the interval [0, ", num_replicas - 1, "] for num_replicas = ", num_replicas);
  num_replicas_ = num_replicas;
  rank_ = rank;
  DistributedSampler::reset(dataset_size_);
}

void DistributedSampler::reset(std::optional<int64_t> new_size) {
  if (!new_size) return;
  LOCKSTEP_CHECK(*new_size >= 0, "DistributedSampler::reset: the dataset size must be non-negative, got ", *new_size);
  dataset_size_ = *new_size;
  // PyTorch: ceil((N - W) / W) when dropping a ragged tail, which is floor(N / W); else ceil(N / W).
  num_samples_ = drop_last_ ? dataset_size_ / num_replicas_ : (dataset_size_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::indices() {
  std::vector<int64_t> all;
  if (shuffle_) {
    Generator g(seed_ + static_cast<uint64_t>(epoch_));
    all = g.randperm(dataset_size_);
  } else {
    all.resize(dataset_size_);
    std::iota(all.begin(), all.end(), 0);
  }
  // Position p of the padded (or cut) list of total_size() is all[p % N]; rank r takes p = r + k * W.
  std::vector<int64_t> mine(num_samples_);
  for (int64_t k = 0; k < num_samples_; ++k) mine[k] = all[(rank_ + k * num_replicas_) % dataset_size_];
  return mine;
}

}  // namespace lockstep::data
