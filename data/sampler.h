// Samplers: the order in which a DataLoader visits a dataset, one index list per epoch, as
// torch.utils.data.Sampler. SequentialSampler and RandomSampler are here; DistributedSampler, which
// shards the indices across ranks, is in data/distributed_sampler.h.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/generator.h"

namespace lockstep::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices of the next epoch, in order (size() of them).
  virtual std::vector<int64_t> indices() = 0;
  virtual int64_t size() const = 0;
  // Makes the next indices() a function of `epoch` (and the seed) alone; a no-op where order is fixed.
  virtual void set_epoch(int64_t /*epoch*/) {}
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A permutation of 0..n-1, drawn from a Generator seeded with `seed`: each indices() call draws a new
// one, as torch's RandomSampler does each epoch; set_epoch(e) reseeds with seed + e so that the
// order of epoch e is reproducible on its own (e.g. after resuming).
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }
  void set_epoch(int64_t epoch) override;

 private:
  int64_t n_;
  uint64_t seed_;
  Generator generator_;
};

}  // namespace lockstep::data
