// Elements of any dtype to and from float32 buffers, for the CPU kernels that compute bfloat16 and
// float16 tensors in float32 blocks: load 16-bit, compute in float32, store 16-bit, with the rounding of
// BFloat16::round and Float16::round (round to nearest even, NaN stays a quiet NaN). Contiguous runs
// convert a vector register at a time: bfloat16 by a shift (load) and an integer round (store), float16
// by F16C's vcvtph2ps / vcvtps2ph (x86-64-v3 has F16C; the AVX-512 build converts 16 lanes at once).
// vcvtps2ph rounds every float32 as Float16::round does (checked over all 2^32 inputs); vcvtph2ps
// equals Float16::to_float except that a signalling NaN comes back quiet. Other dtypes go through
// static_cast, as a copy through float32 would.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/cpu/isa.h"
#include "tensor/dtype.h"

LOCKSTEP_ISA_BEGIN

// The bfloat16 nearest to f (BFloat16::round), written so that a loop over it vectorizes.
inline uint16_t round_to_bf16(float f) {
  const uint32_t u = __builtin_bit_cast(uint32_t, f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

// dst[i] = float(src[i]) for i < n: contiguous 16-bit elements.
inline void bf16_to_floats(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = __builtin_bit_cast(float, static_cast<uint32_t>(src[i]) << 16);
}
inline void floats_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}
inline void f16_to_floats(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(LOCKSTEP_ISA_AVX512)
  // maskz: the unmasked form trips GCC 12's -Wmaybe-uninitialized inside its own header.
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#endif
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}
inline void floats_to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(LOCKSTEP_ISA_AVX512)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

// dst[i] = float(p[i * stride]) for i < n, p of dtype dt (stride in elements; 0 repeats p[0]).
inline void load_floats(Dtype dt, const void* p, int64_t stride, int64_t n, float* dst) {
  if (stride == 1 && dt == kBFloat16) return bf16_to_floats(static_cast<const uint16_t*>(p), dst, n);
  if (stride == 1 && dt == kFloat16) return f16_to_floats(static_cast<const uint16_t*>(p), dst, n);
  if (stride == 1 && dt == kFloat32) return void(std::memcpy(dst, p, n * sizeof(float)));
  if (dt == kBFloat16 || dt == kFloat16) {
    const auto* h = static_cast<const uint16_t*>(p);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t bits = h[i * stride];
      dst[i] = dt == kBFloat16 ? __builtin_bit_cast(float, static_cast<uint32_t>(bits) << 16) : _cvtsh_ss(bits);
    }
    return;
  }
  dispatch_compute(dt, "load_floats", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(p);
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(x[i * stride]);
  });
}

// p[i * stride] = src[i] converted to dtype dt, for i < n.
inline void store_floats(Dtype dt, void* p, int64_t stride, int64_t n, const float* src) {
  if (stride == 1 && dt == kBFloat16) return floats_to_bf16(src, static_cast<uint16_t*>(p), n);
  if (stride == 1 && dt == kFloat16) return floats_to_f16(src, static_cast<uint16_t*>(p), n);
  if (stride == 1 && dt == kFloat32) return void(std::memcpy(p, src, n * sizeof(float)));
  if (dt == kBFloat16 || dt == kFloat16) {
    auto* h = static_cast<uint16_t*>(p);
    for (int64_t i = 0; i < n; ++i)
      h[i * stride] = dt == kBFloat16 ? round_to_bf16(src[i]) : _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
    return;
  }
  dispatch_compute(dt, "store_floats", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = static_cast<T*>(p);
    for (int64_t i = 0; i < n; ++i) y[i * stride] = static_cast<T>(src[i]);
  });
}

LOCKSTEP_ISA_END
