// CPU GEMM: Eigen's kernels compiled for x86-64-v3 and for x86-64-v4 (AVX-512, ~1.5x faster products
// where the processor has it; tensor/cpu/isa.h), and bfloat16 products with float32 accumulation
// (tensor/cpu/gemm_bf16.h: AVX512-BF16 where the processor has it). Large products are split over the
// intra-op threads (tensor/parallel.h).
#pragma once

#include <cstdint>

namespace lockstep {
struct BFloat16;
}

namespace lockstep::cpu {

// BLAS-style, row-major: C[m, n] = alpha * op(A) @ op(B) + beta * C, where op(A) is [m, k] and
// op(B) is [k, n]. A is stored row-major with row stride lda: as [m, k] (lda >= k), or as [k, m]
// (lda >= m) when ta, op(A) then being its transpose; likewise B ([k, n] or, when tb, [n, k]) and
// C ([m, n], ldc >= n). With beta == 0, C's old contents are never read (NaN in C stays out).
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);
// bfloat16 A and B, products accumulated in float32; alpha, beta and the sum with beta * C in float32.
// C float32 (a weight gradient, autocast's float32 outputs) or bfloat16, rounded once at the end
// (nearest even), as PyTorch's bfloat16 matmul.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc);

}  // namespace lockstep::cpu
