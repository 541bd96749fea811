// CPU GEMM with runtime dispatch: Eigen's kernels compiled twice, for the x86-64-v3 baseline (AVX2 +
// FMA) and for x86-64-v4 (AVX-512), and the widest one the processor supports is used. Binaries
// stay portable while AVX-512 machines get ~1.5x faster products. LOCKSTEP_CPU_ISA=avx2 forces the
// baseline (for comparisons).
#pragma once

#include <cstdint>

namespace lockstep::cpu {

// C [m, n] = alpha * op(A) @ op(B) + beta * C, all row-major and contiguous. A is stored as
// [a_rows, a_cols] and op(A) is its transpose when ta; likewise B.
void gemm(const float* a, int64_t a_rows, int64_t a_cols, bool ta, const float* b, int64_t b_rows, int64_t b_cols,
          bool tb, float* c, float alpha, float beta);
void gemm(const double* a, int64_t a_rows, int64_t a_cols, bool ta, const double* b, int64_t b_rows,
          int64_t b_cols, bool tb, double* c, double alpha, double beta);

// "avx512" or "avx2": the kernels gemm() runs.
const char* gemm_isa();

}  // namespace lockstep::cpu
