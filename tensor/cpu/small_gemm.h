// GEMM for small matrices without packing (tensor/cpu/gemm.h's contract): the rows of C are kept in
// vector registers while the rows of op(B) stream from L1. For attention's per-head products
// ([64, 32] x [32, 64] and the like) Eigen spends as long packing both operands and setting up its
// blocking as multiplying. Compiled per ISA (tensor/cpu/isa.h).
#pragma once

#include <cstdint>

#define LOCKSTEP_CPU_SMALL_GEMM_DECL(isa)                                                                  \
  namespace lockstep::cpu::isa {                                                                           \
  /* C = alpha * op(A) @ op(B) + beta * C as gemm(); false (nothing done) where this kernel does not      \
     apply: n not a whole number of vectors, or op(B) too large for its buffer. */                         \
  template <typename T>                                                                                    \
  bool small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,      \
                  const T* b, int64_t ldb, T beta, T* c, int64_t ldc);                                     \
  }
LOCKSTEP_CPU_SMALL_GEMM_DECL(avx2)
LOCKSTEP_CPU_SMALL_GEMM_DECL(avx512)
#undef LOCKSTEP_CPU_SMALL_GEMM_DECL
