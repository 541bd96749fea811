// SequentialSampler and RandomSampler.
#include "data/sampler.h"

#include <numeric>

#include "common/check.h"

namespace lockstep::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  LOCKSTEP_CHECK(n >= 0, "SequentialSampler: the number of examples must be non-negative, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() {
  std::vector<int64_t> idx(n_);
  std::iota(idx.begin(), idx.end(), 0);
  return idx;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed), generator_(seed) {
  LOCKSTEP_CHECK(n >= 0, "RandomSampler: the number of examples must be non-negative, got ", n);
}

std::vector<int64_t> RandomSampler::indices() { return generator_.randperm(n_); }

void RandomSampler::set_epoch(int64_t epoch) { generator_.manual_seed(seed_ + static_cast<uint64_t>(epoch)); }

}  // namespace lockstep::data
