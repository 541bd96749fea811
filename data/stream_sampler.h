// StreamSampler: positions in a stream, as LibTorch's samplers::StreamSampler.
//
// LibTorch's StreamSampler hands out batch sizes, not indices: next(batch_size) is how many examples to
// fetch next, min(batch_size, what is left of epoch_size), until epoch_size have been handed out (then
// nullopt; reset() starts over). lockstep keeps that (next, reset, BatchSize) for loops that drive a
// stream by hand, and gives the DataLoader the same thing as positions: indices() is 0, 1, ...,
// epoch_size - 1, which the DataLoader cuts into batches exactly as next(batch_size) counts them, and a
// stream dataset returns its examples at those positions (ChunkDataset: the epoch's p-th example).
// Positions rather than counts are what make DataLoader workers safe: the examples of a batch are
// fixed by its positions, not by which worker happens to read first.
//
// Sharding: with num_replicas W > 1, rank r's positions are DistributedSampler's without shuffling:
// r, r + W, r + 2W, ..., padded (repeating from the start) or cut (drop_last) to an equal count per
// rank, so that every rank makes as many batches. A stream that shards itself (ChunkDataset, by
// chunks) uses one replica. num_replicas / rank of -1 mean "from the process group", as there.
//
// epoch_size kUnknownSize: unbounded (LibTorch's BatchSizeSampler), one replica only. The DataLoader
// then reads positions 0, 1, 2, ... batch by batch until the dataset returns an empty batch; it makes
// such a sampler itself for a dataset of unknown size when it is given none.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "data/sampler.h"

namespace lockstep::data {

// A number of examples to fetch (LibTorch's samplers::BatchSize).
struct BatchSize {
  explicit BatchSize(int64_t size) : size_(size) {}
  int64_t size() const noexcept { return size_; }
  operator int64_t() const noexcept { return size_; }
  int64_t size_;
};

class StreamSampler : public Sampler {
 public:
  explicit StreamSampler(int64_t epoch_size, int num_replicas = 1, int rank = 0, bool drop_last = false);

  std::vector<int64_t> indices() override;  // this rank's positions (bounded epochs only)
  int64_t size() const override;            // how many: this rank's share, or kUnknownSize
  // Restarts next()'s count; `new_size` replaces epoch_size (LibTorch's reset).
  void reset(std::optional<int64_t> new_size = std::nullopt) override;
  // The next batch's size, or nullopt once this rank's share of the epoch has been handed out.
  std::optional<BatchSize> next(int64_t batch_size);

  int64_t epoch_size() const { return epoch_size_; }

 private:
  void shard();

  int64_t epoch_size_;
  int num_replicas_;
  int rank_;
  bool drop_last_;
  std::optional<DistributedSampler> positions_;  // empty when unbounded
  int64_t retrieved_ = 0;                        // handed out by next() since reset()
};

}  // namespace lockstep::data
