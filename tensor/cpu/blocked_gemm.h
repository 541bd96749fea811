// GEMM of float32 products too large for small_gemm (tensor/cpu/gemm.h's contract), blocked for the
// caches: op(B) is packed a block of kc rows at a time into micro-panels a few vectors wide that stay
// in L1, while rows of op(A) are read in place and broadcast. On this project's AVX-512 machine
// Eigen's GEMM ran the GPT's products at 120-150 GFLOP/s against MKL's 165-195 (gemm_bench and
// bench/torch_gemm.py); this kernel closes most of that gap. Compiled per ISA (tensor/cpu/isa.h).
#pragma once

#include <cstdint>

#define LOCKSTEP_CPU_BLOCKED_GEMM_DECL(isa)                                                              \
  namespace lockstep::cpu::isa {                                                                         \
  /* C = alpha * op(A) @ op(B) + beta * C, as gemm(); m, n, k > 0, arguments checked by the caller. */   \
  void blocked_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,      \
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);        \
  }
LOCKSTEP_CPU_BLOCKED_GEMM_DECL(avx2)
LOCKSTEP_CPU_BLOCKED_GEMM_DECL(avx512)
#undef LOCKSTEP_CPU_BLOCKED_GEMM_DECL
