// Samplers: the order in which a DataLoader visits a dataset, one index list per epoch, as
// torch.utils.data.Sampler. SequentialSampler and RandomSampler are here; DistributedSampler, which
// shards the indices across ranks, is in data/distributed_sampler.h, and StreamSampler, positions in a
// stream, in data/stream_sampler.h.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tensor/generator.h"

namespace lockstep::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices of the next epoch, in order (size() of them).
  virtual std::vector<int64_t> indices() = 0;
  // How many indices() returns; kUnknownSize for an unbounded stream, whose indices() the DataLoader
  // never calls (it reads positions 0, 1, 2, ... until the dataset runs out).
  virtual int64_t size() const = 0;
  // Makes the next indices() a function of `epoch` (and the seed) alone; a no-op where order is fixed.
  virtual void set_epoch(int64_t /*epoch*/) {}
  // LibTorch's Sampler::reset: `new_size` replaces the number of examples drawn from (ChunkDataset
  // resets its chunk sampler to the reader's chunk count, its example sampler to each chunk's size).
  // The default accepts only no new size: a sampler of yours that ChunkDataset resizes overrides it.
  virtual void reset(std::optional<int64_t> new_size = std::nullopt);
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }
  void reset(std::optional<int64_t> new_size = std::nullopt) override;

 private:
  int64_t n_;
};

// A permutation of 0..n-1, a new one each indices() call (each epoch), as torch's RandomSampler.
// Without a seed (PyTorch's default, generator=None) each call seeds a fresh Generator with a number
// drawn from the global generator, so the order follows manual_seed; set_epoch is then a no-op. With a
// seed (generator=torch.Generator().manual_seed(seed)), draws come from its own Generator, and
// set_epoch(e) reseeds it with seed + e so that the order of epoch e is reproducible on its own (e.g.
// after resuming).
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, std::optional<uint64_t> seed = std::nullopt);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }
  void set_epoch(int64_t epoch) override;
  void reset(std::optional<int64_t> new_size = std::nullopt) override;  // a new n; the generator goes on

 private:
  int64_t n_;
  std::optional<uint64_t> seed_;
  Generator generator_;
};

}  // namespace lockstep::data
