// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator, so element i of a random tensor is a pure function of (seed, counter base + i) and a GPU
// thread draws its own element without sharing state. This is how rand() and randn() fill tensors on a
// device (tensor/factory.cpp); host tensors keep the Mersenne Twister of generator.h. Both backends
// include this one definition, so the CPU backend's uniform() and normal() are the references for the
// GPU's (bit-exact for uniform; normal's log and cos may differ in the last ulp on a GPU).
#pragma once

#include <math.h>

#include <cstdint>

#include "tensor/host_device.h"

namespace lockstep::detail {

struct Philox4 {
  uint32_t v[4];
};

// The 128-bit counter and 64-bit key of the paper (Random123's known answers hold: tensor_test).
LOCKSTEP_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kKey0 = 0x9E3779B9u, kKey1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt(3) - 1)
  uint32_t c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kMul0} * c0, p1 = uint64_t{kMul1} * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kKey0;
    k1 += kKey1;
  }
  return {{c0, c1, c2, c3}};
}

// A 64-bit counter (the high words 0) and a 64-bit seed as the key.
LOCKSTEP_HOST_DEVICE inline Philox4 philox4x32_10(uint64_t counter, uint64_t seed) {
  return philox4x32_10(Philox4{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0}},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Element i's value in [0, 1): 24 random bits for float, 53 for double (as generator.h's conversions).
template <typename T>
LOCKSTEP_HOST_DEVICE inline T philox_uniform(uint64_t seed, uint64_t counter) {
  const Philox4 r = philox4x32_10(counter, seed);
  if constexpr (sizeof(T) == 4) {
    return static_cast<T>(r.v[0] >> 8) * static_cast<T>(0x1.0p-24);
  } else {
    const uint64_t bits = (uint64_t{r.v[0]} << 32 | r.v[1]) >> 11;
    return static_cast<T>(bits) * static_cast<T>(0x1.0p-53);
  }
}

// Element i's standard normal: Box-Muller on the two uniforms of one Philox draw, r cos(2 pi u2) with
// r = sqrt(-2 log u1), u1 in (0, 1] (log finite) and u2 in [0, 1). One counter per element, as uniform,
// so an element needs no neighbour and a draw of n values advances the counter by n. float: u1 from
// 32 bits (v * 2^-32 + 2^-33, as curand, so the tails reach 6.7 sigma, not the 5.8 of 24 bits), u2 from
// 24; double: 53 bits each, from the four words.
template <typename T>
LOCKSTEP_HOST_DEVICE inline T philox_normal(uint64_t seed, uint64_t counter) {
  const Philox4 r = philox4x32_10(counter, seed);
  if constexpr (sizeof(T) == 4) {
    const float u1 = static_cast<float>(r.v[0]) * 0x1.0p-32f + 0x1.0p-33f;
    const float u2 = static_cast<float>(r.v[1] >> 8) * 0x1.0p-24f;
    return ::sqrtf(-2.0f * ::logf(u1)) * ::cosf(6.2831853071795865f * u2);
  } else {
    const double u1 = 1.0 - static_cast<double>((uint64_t{r.v[0]} << 32 | r.v[1]) >> 11) * 0x1.0p-53;
    const double u2 = static_cast<double>((uint64_t{r.v[2]} << 32 | r.v[3]) >> 11) * 0x1.0p-53;
    return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.2831853071795865 * u2);
  }
}

}  // namespace lockstep::detail
