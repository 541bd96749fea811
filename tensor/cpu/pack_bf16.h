// bfloat16 operands laid out for vdpbf16ps, which multiplies pairs of adjacent depths: the pairs of the
// vector operand side by side as 32-bit words ([depth / 2][column], VNNI order). Shared by the
// AVX512-BF16 and AMX GEMMs (gemm_bf16_avx512.cpp, gemm_bf16_amx.cpp) and fused attention
// (attention_bf16_avx512.cpp), with the GEMMs' packing of B and their stores of C.
//
// Not in pack.h: that header is built per ISA (tensor/cpu/isa.h) into avx2 and avx512 namespaces,
// while these need AVX512-BF16's file target. Include this after the including file's
// `#pragma GCC target(... avx512bf16 ...)`, so that the functions are compiled for that target; they live
// in lockstep::cpu::avx512_bf16, which only such files define, so no copy of them can be chosen by the
// linker for a processor without AVX-512.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lockstep::cpu::avx512_bf16 {

// The two bfloat16 values at p as one 32-bit word (p[0] in the low half).
inline uint32_t pair_at(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// dst[j] = the pair (r0[j], r1[j]) for j < cols (r1 null: the depth past the end, zero), 0 up to width
// (a multiple of 32): two rows interleaved 16 bits by 16 bits, 32 columns per two vpermt2w.
inline void interleave_rows(const uint16_t* r0, const uint16_t* r1, int64_t cols, int64_t width, uint32_t* dst) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                      37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  for (int64_t j = 0; j < width; j += 32) {
    const int64_t left = std::clamp<int64_t>(cols - j, 0, 32);
    const __mmask32 m = left == 32 ? ~__mmask32(0) : (__mmask32(1) << left) - 1;
    const __m512i x0 = _mm512_maskz_loadu_epi16(m, r0 + j);
    const __m512i x1 = r1 ? _mm512_maskz_loadu_epi16(m, r1 + j) : _mm512_setzero_si512();
    _mm512_storeu_si512(dst + j, _mm512_permutex2var_epi16(x0, lo, x1));
    _mm512_storeu_si512(dst + j + 16, _mm512_permutex2var_epi16(x0, hi, x1));
  }
}

// dst[q * width + j] = the pair (x[2q][j], x[2q + 1][j]) for j < cols, rows of stride ld, the odd last
// row paired with 0, zeros past cols up to width (a multiple of 32): B of a product over x's rows.
inline void interleave_row_pairs(const uint16_t* x, int64_t ld, int64_t rows, int64_t cols, int64_t width,
                                 uint32_t* dst) {
  for (int64_t q = 0; q < (rows + 1) / 2; ++q) {
    const uint16_t* r0 = x + 2 * q * ld;
    interleave_rows(r0, 2 * q + 1 < rows ? r0 + ld : nullptr, cols, width, dst + q * width);
  }
}

// dst[q * width + c] = the pair (x[c][2q], x[c][2q + 1]) of row c (stride ld) for c < rows and
// 2q < depth, the odd last depth paired with 0, zeros for rows <= c < width: the rows' pairs transposed
// (B of a product over x's columns).
inline void transpose_pairs(const uint16_t* x, int64_t ld, int64_t rows, int64_t depth, int64_t width,
                            uint32_t* dst) {
  const int64_t whole = depth / 2, kp = (depth + 1) / 2;
  for (int64_t q = 0; q < kp; ++q) std::fill(dst + q * width + rows, dst + (q + 1) * width, 0u);
  for (int64_t c = 0; c < rows; ++c) {
    const uint16_t* row = x + c * ld;
    for (int64_t q = 0; q < whole; ++q) dst[q * width + c] = pair_at(row + 2 * q);
    if (whole < kp) dst[whole * width + c] = row[depth - 1];
  }
}

// packed[jp][q][nr] (32-bit pairs, a panel of nr columns every kps pairs) = op(B)[p0 + 2q .. +1, jp * nr + j]
// for the n columns at b (B [k, n], or [n, k] where tb); zeros past n, past k and from kp = (kc + 1) / 2
// up to kps pairs (the AMX kernel's tiles take 16 pairs at a time).
inline void pack_b(bool tb, const uint16_t* b, int64_t ldb, int64_t n, int64_t k, int64_t p0, int64_t kc, int64_t nr,
                   int64_t kps, uint32_t* packed) {
  const int64_t kp = (kc + 1) / 2;
  const int64_t panels = (n + nr - 1) / nr;
  for (int64_t jp = 0; jp < panels; ++jp) std::fill(packed + (jp * kps + kp) * nr, packed + (jp + 1) * kps * nr, 0u);
  if (!tb) {  // B [k, n]: rows 2q and 2q + 1 interleaved
    for (int64_t q = 0; q < kp; ++q) {
      const uint16_t* r0 = b + (p0 + 2 * q) * ldb;
      const uint16_t* r1 = p0 + 2 * q + 1 < k ? r0 + ldb : nullptr;
      for (int64_t jp = 0; jp < panels; ++jp)
        interleave_rows(r0 + jp * nr, r1 ? r1 + jp * nr : nullptr, n - jp * nr, nr, packed + (jp * kps + q) * nr);
    }
    return;
  }
  // B [n, k]: a pair is one 32-bit word of a row of B; the panel is the transpose of [nr][kp] words.
  for (int64_t jp = 0; jp < panels; ++jp)
    transpose_pairs(b + jp * nr * ldb + p0, ldb, std::min<int64_t>(nr, n - jp * nr), kc, nr, packed + jp * kps * nr);
}

// 16 floats rounded to bfloat16 as BFloat16::round: nearest even, NaN kept quiet, denormals kept
// (vcvtneps2bf16 flushes them).
inline __m256i round_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

inline __m512 load_bf16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// 16 columns of a row of C (those in m) = alpha * acc + beta * C (beta == 0 never reads C).
inline void store(__m512 acc, float* c, __mmask16 m, float alpha, float beta) {
  __m512 out = _mm512_mul_ps(acc, _mm512_set1_ps(alpha));
  if (beta != 0.f) out = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c), _mm512_set1_ps(beta), out);
  _mm512_mask_storeu_ps(c, m, out);
}
inline void store(__m512 acc, uint16_t* c, __mmask16 m, float alpha, float beta) {
  __m512 out = _mm512_mul_ps(acc, _mm512_set1_ps(alpha));
  if (beta != 0.f) out = _mm512_fmadd_ps(load_bf16(c, m), _mm512_set1_ps(beta), out);
  _mm256_mask_storeu_epi16(c, m, round_bf16(out));
}

// The mask of the first min(max(left, 0), 16) lanes.
inline __mmask16 first_lanes(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
}

}  // namespace lockstep::cpu::avx512_bf16
