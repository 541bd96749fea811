// Generator: lockstep's random number source, as torch.Generator. The same seed gives the same
// sequence on every machine (a fixed 64-bit Mersenne Twister and fixed conversions, no
// implementation-defined std:: distributions), which DistributedSampler relies on: every rank draws
// the same permutation.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace lockstep {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed), seed_(seed) {}
  void manual_seed(uint64_t seed) {
    engine_.seed(seed);
    have_spare_ = false;
    seed_ = seed;
    philox_counter_ = 0;
  }

  uint64_t next_u64() { return engine_(); }
  double uniform_double() { return (engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  float uniform_float() { return (engine_() >> 40) * 0x1.0p-24f; }   // [0, 1)
  double normal();  // standard normal, Box-Muller
  // Uniform integer in [0, n), without modulo bias.
  uint64_t below(uint64_t n);
  // A uniformly random permutation of 0..n-1 (Fisher-Yates).
  std::vector<int64_t> randperm(int64_t n);

  // Draws on a device (tensor/philox.h) use this seed and a counter that each draw of n values
  // advances by n, as torch.cuda's Philox offset: the same seed gives the same device tensors, and
  // two draws never share counters. Host draws and device draws are separate streams.
  uint64_t seed() const { return seed_; }
  uint64_t reserve_philox(uint64_t n) {
    const uint64_t base = philox_counter_;
    philox_counter_ += n;
    return base;
  }

 private:
  std::mt19937_64 engine_;
  bool have_spare_ = false;
  double spare_ = 0;
  uint64_t seed_ = 0, philox_counter_ = 0;
};

// The process-wide generator behind rand/randn/randint and module initialisation.
Generator& default_generator();
// Seeds the default generator, as torch.manual_seed.
void manual_seed(uint64_t seed);

}  // namespace lockstep
