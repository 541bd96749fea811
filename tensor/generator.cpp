// Generator: reproducible random draws (see generator.h for why not std:: distributions).
#include "tensor/generator.h"

#include <cmath>
#include <numeric>

namespace lockstep {

double Generator::normal() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  double u1 = 1.0 - uniform_double();  // (0, 1]: log is finite
  double u2 = uniform_double();
  double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * M_PI * u2);
  have_spare_ = true;
  return r * std::cos(2.0 * M_PI * u2);
}

uint64_t Generator::below(uint64_t n) {
  // Rejection sampling on the top of the range keeps every value equally likely.
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = engine_(); while (x >= limit);
  return x % n;
}

std::vector<int64_t> Generator::randperm(int64_t n) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[below(i + 1)]);
  return p;
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace lockstep
