// bfloat16 operands laid out for vdpbf16ps, which multiplies pairs of adjacent depths: the pairs of the
// vector operand side by side as 32-bit words ([depth / 2][column], VNNI order). Shared by the
// AVX512-BF16 GEMM (gemm_bf16_avx512.cpp) and fused attention (attention_bf16_avx512.cpp).
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

}  // namespace lockstep::cpu::avx512_bf16
