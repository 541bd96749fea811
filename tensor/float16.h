// Float16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits), as a storage type. Arithmetic converts
// to float32, as BFloat16's (tensor/dtype.h): the ops layer computes float16 tensors in float32 and rounds
// the result back. The conversions are bit manipulation, so the CPU and every CUDA kernel round alike.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/host_device.h"

namespace lockstep {

struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  LOCKSTEP_HOST_DEVICE Float16(float f) : bits(round(f)) {}
  LOCKSTEP_HOST_DEVICE operator float() const { return to_float(bits); }

  // Largest finite value, 65504; smallest normal 2^-14 (6.1035e-5); smallest subnormal 2^-24.
  LOCKSTEP_HOST_DEVICE static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) {
      u = sign | 0x7f800000u | (m << 13);  // inf, or NaN with its payload
    } else if (e == 0) {
      const float f = static_cast<float>(m) * 0x1p-24f;  // zero or subnormal: m units of 2^-24, exactly
      memcpy(&u, &f, 4);
      u |= sign;
    } else {
      u = sign | ((e + 112u) << 23) | (m << 13);  // rebias the exponent: 127 - 15
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
  }

  // Round to nearest, ties to even; beyond 65520 (half way to 65536) to inf; NaN stays a (quiet) NaN.
  LOCKSTEP_HOST_DEVICE static uint16_t round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (a >= 0x38800000u) {  // normal in float16: rebias, then round the 13 dropped bits (a carry may
      const uint32_t r = a - 0x38000000u;  // reach the exponent, which is the right result)
      return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    if (a <= 0x33000000u) return sign;  // at most 2^-25, half the smallest subnormal: ties to even zero
    // Subnormal: the value in units of 2^-24 is m * 2^(e - 126), e the float exponent (102..112).
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // q may become 0x400, the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
};

}  // namespace lockstep
