// SequentialSampler and RandomSampler.
#include "data/sampler.h"

#include <numeric>

#include "common/check.h"

namespace lockstep::data {

void Sampler::reset(std::optional<int64_t> new_size) {
  LOCKSTEP_CHECK(!new_size || *new_size == size(), "Sampler::reset: this sampler cannot be resized from ", size(),
                 " to ", *new_size, " examples (override reset(new_size) to allow it)");
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  LOCKSTEP_CHECK(n >= 0, "SequentialSampler: the number of examples must be non-negative, got ", n);
}

void SequentialSampler::reset(std::optional<int64_t> new_size) {
  if (!new_size) return;
  LOCKSTEP_CHECK(*new_size >= 0, "SequentialSampler::reset: the number of examples must be non-negative, got ", *new_size);
  n_ = *new_size;
}

std::vector<int64_t> SequentialSampler::indices() {
  std::vector<int64_t> idx(n_);
  std::iota(idx.begin(), idx.end(), 0);
  return idx;
}

RandomSampler::RandomSampler(int64_t n, std::optional<uint64_t> seed) : n_(n), seed_(seed), generator_(seed.value_or(0)) {
  LOCKSTEP_CHECK(n >= 0, "RandomSampler: the number of examples must be non-negative, got ", n);
}

std::vector<int64_t> RandomSampler::indices() {
  if (!seed_) return Generator(default_generator().next_u64()).randperm(n_);
  return generator_.randperm(n_);
}

void RandomSampler::reset(std::optional<int64_t> new_size) {
  if (!new_size) return;
  LOCKSTEP_CHECK(*new_size >= 0, "RandomSampler::reset: the number of examples must be non-negative, got ", *new_size);
  n_ = *new_size;
}

void RandomSampler::set_epoch(int64_t epoch) {
  if (seed_) generator_.manual_seed(*seed_ + static_cast<uint64_t>(epoch));
}

}  // namespace lockstep::data
