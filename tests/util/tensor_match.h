// CHECK_MATCH(got, want, rtol = 0, atol = 0): a tensor on any device against a CPU reference, element
// by element, with a message that names how many elements differ and the first of them. The device
// tests compare kernels this way (tests/cuda/).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/api.h"

namespace lockstep::testing {

// "" when `got` has `want`'s shape and dtype and every element is within atol + rtol * |want| of want's
// (NaN matches NaN, an infinity the same infinity); otherwise a description of the mismatch.
inline std::string mismatch(const Tensor& got, const Tensor& want, double rtol = 0, double atol = 0) {
  std::ostringstream os;
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    os << "got " << got.shape() << " " << got.dtype() << ", want " << want.shape() << " " << want.dtype();
    return os.str();
  }
  const std::vector<double> g = internal::to_device(got, Device::cpu()).to_vector<double>();
  const std::vector<double> w = internal::to_device(want, Device::cpu()).to_vector<double>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                    std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (!bad) return "";
  os.precision(17);
  os << bad << " of " << g.size() << " elements differ; first at " << first << ": got " << g[first] << ", want "
     << w[first] << " (shape " << want.shape() << ", " << want.dtype() << ")";
  return os.str();
}

}  // namespace lockstep::testing

// Fails the check with the message when `message` (a mismatch description) is not empty.
#define CHECK_NO_MISMATCH(message)                \
  do {                                            \
    const std::string m_ = (message);             \
    CHECK_MESSAGE(m_.empty(), m_);                \
  } while (0)

#define CHECK_MATCH(got, want, ...) \
  CHECK_NO_MISMATCH(::lockstep::testing::mismatch((got), (want) __VA_OPT__(, ) __VA_ARGS__))
