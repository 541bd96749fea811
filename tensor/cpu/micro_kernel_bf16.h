// The vdpbf16ps micro-kernel of the AVX512-BF16 GEMM (gemm_bf16_avx512.cpp) and of fused attention's
// tile products (attention_bf16_avx512.cpp): MR rows x NV vectors of 16 columns of C accumulated in
// float32 registers, per pair of depths NV vector loads of VNNI-packed B (pack_bf16.h), one 32-bit
// broadcast of A per row and MR * NV vdpbf16ps (32 multiply-adds of bfloat16 pairs each).
//
// Include after the including file's `#pragma GCC target(... avx512bf16 ...)`, as pack_bf16.h (which
// says why); the functions are static, so each file keeps its own copy, compiled for its own target
// and inlined as its callers need.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "tensor/cpu/pack_bf16.h"

namespace lockstep::cpu::avx512_bf16 {

// C[rows, cols] = alpha * A B + beta * C (beta == 0 never reads C) for rows <= MR and cols <= 16 * NV,
// a partial vector masked: pair q of A's row r is the word at a + r * rs + q * qs (bfloat16 units), pair
// q of B's column j the word b[q * ldb + j], zero past B's columns. kPrefetch > 0 prefetches B that many
// pairs ahead (the GEMM streams its panel from L2; attention's tiles are in L1).
template <int MR, int NV, int kPrefetch, typename TC>
static inline void dpbf16_kernel(int64_t kp, const uint16_t* a, int64_t rs, int64_t qs, const uint32_t* b,
                                 int64_t ldb, TC* c, int64_t ldc, int64_t rows, int64_t cols, float alpha,
                                 float beta) {
  __m512 acc[MR][NV];
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t q = 0; q < kp; ++q, a += qs, b += ldb) {
    __m512bh bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + v * 16);
    if constexpr (kPrefetch > 0) {
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetch * ldb + v * 16), _MM_HINT_T0);
    }
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(pair_at(a + r * rs)));
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v) mask[v] = first_lanes(cols - v * 16);
  for (int r = 0; r < MR; ++r) {
    if (r >= rows) break;
    for (int v = 0; v < NV; ++v) store(acc[r][v], c + r * ldc + v * 16, mask[v], alpha, beta);
  }
}

// dpbf16_kernel with as few vectors as cols (<= 64) needs: the last panel of C is as narrow as its
// columns (the GPT's 65-token head would otherwise compute 128 columns for 65).
template <int MR, int kPrefetch, typename TC>
static inline void dpbf16_kernel_cols(int64_t kp, const uint16_t* a, int64_t rs, int64_t qs, const uint32_t* b,
                                      int64_t ldb, TC* c, int64_t ldc, int64_t rows, int64_t cols, float alpha,
                                      float beta) {
  if (cols > 48) dpbf16_kernel<MR, 4, kPrefetch>(kp, a, rs, qs, b, ldb, c, ldc, rows, cols, alpha, beta);
  else if (cols > 32) dpbf16_kernel<MR, 3, kPrefetch>(kp, a, rs, qs, b, ldb, c, ldc, rows, cols, alpha, beta);
  else if (cols > 16) dpbf16_kernel<MR, 2, kPrefetch>(kp, a, rs, qs, b, ldb, c, ldc, rows, cols, alpha, beta);
  else dpbf16_kernel<MR, 1, kPrefetch>(kp, a, rs, qs, b, ldb, c, ldc, rows, cols, alpha, beta);
}

}  // namespace lockstep::cpu::avx512_bf16
