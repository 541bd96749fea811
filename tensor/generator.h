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
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  void manual_seed(uint64_t seed) { engine_.seed(seed); have_spare_ = false; }

  uint64_t next_u64() { return engine_(); }
  double uniform_double() { return (engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  float uniform_float() { return (engine_() >> 40) * 0x1.0p-24f; }   // [0, 1)
  double normal();  // standard normal, Box-Muller
  // Uniform integer in [0, n), without modulo bias.
  uint64_t below(uint64_t n);
  // A uniformly random permutation of 0..n-1 (Fisher-Yates).
  std::vector<int64_t> randperm(int64_t n);

 private:
  std::mt19937_64 engine_;
  bool have_spare_ = false;
  double spare_ = 0;
};

// The process-wide generator behind rand/randn/randint and module initialisation.
Generator& default_generator();
// Seeds the default generator, as torch.manual_seed.
void manual_seed(uint64_t seed);

}  // namespace lockstep
