// DistributedSampler: each rank's share of a dataset, exactly as torch.utils.data.DistributedSampler.
//
// Every rank builds the same list: 0..N-1, or with `shuffle` a permutation from a Generator seeded
// with seed + epoch (identical on every rank). With W = num_replicas:
//   drop_last == false: num_samples = ceil(N / W); the list is padded to total = num_samples * W by
//                       repeating it from the start (cyclically when the padding exceeds N);
//   drop_last == true:  num_samples = floor(N / W) (PyTorch's ceil((N - W) / W) when W does not
//                       divide N); the list is cut to total = num_samples * W.
// Rank r takes list[r], list[r + W], list[r + 2W], ... (num_samples indices). E.g. N = 5, W = 3, no
// shuffle: list [0, 1, 2, 3, 4, 0]; rank 0 gets [0, 3], rank 1 [1, 4], rank 2 [2, 0].
//
// Call set_epoch(e) at the start of each epoch, as in PyTorch, or every epoch has the same order.
// Over a ChunkDataset's chunks (as its chunk sampler) it is LibTorch's DistributedRandomSampler: each
// rank reads its share of the chunks, and reset(chunk_count) resizes it to the reader's count.
#pragma once

#include "data/dataset.h"
#include "data/sampler.h"

namespace lockstep::data {

class DistributedSampler : public Sampler {
 public:
  // num_replicas / rank of -1 mean "from the initialized process group" (data/world.h).
  explicit DistributedSampler(int64_t dataset_size, int num_replicas = -1, int rank = -1, bool shuffle = true,
                              uint64_t seed = 0, bool drop_last = false);
  explicit DistributedSampler(const Dataset& dataset, int num_replicas = -1, int rank = -1, bool shuffle = true,
                              uint64_t seed = 0, bool drop_last = false)
      : DistributedSampler(dataset.size(), num_replicas, rank, shuffle, seed, drop_last) {}

  std::vector<int64_t> indices() override;
  int64_t size() const override { return num_samples_; }  // indices per rank
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  void reset(std::optional<int64_t> new_size = std::nullopt) override;  // a new dataset size

  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int64_t epoch() const { return epoch_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace lockstep::data
