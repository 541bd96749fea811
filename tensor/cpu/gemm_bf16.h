// The bfloat16 GEMM kernels behind cpu::gemm's bfloat16 overloads (tensor/cpu/gemm.h): bfloat16 A and
// B, float32 accumulation, C float32 or bfloat16. One thread each, arguments checked by gemm.cpp, m, n,
// k > 0. Chosen at run time (tensor/cpu/isa.h), the first that the processor has:
// - amx_bf16: TDPBF16PS on AMX tiles (gemm_bf16_amx.cpp), where use_amx_bf16() and its first product
//   agrees with avx512_bf16's (gemm.cpp);
// - avx512_bf16: vdpbf16ps on VNNI-packed B (gemm_bf16_avx512.cpp), where the CPU has AVX512-BF16;
// - fallback: blocks of the operands converted to float32 for the float32 GEMM (gemm_bf16.cpp).
#pragma once

#include <cstdint>

namespace lockstep {
struct BFloat16;
}

#define LOCKSTEP_CPU_GEMM_BF16_DECL(ns)                                                                          \
  namespace lockstep::cpu::ns {                                                                                  \
  void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda, \
                 const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);                             \
  void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda, \
                 const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc);                          \
  }
LOCKSTEP_CPU_GEMM_BF16_DECL(amx_bf16)
LOCKSTEP_CPU_GEMM_BF16_DECL(avx512_bf16)
LOCKSTEP_CPU_GEMM_BF16_DECL(bf16_fallback)
#undef LOCKSTEP_CPU_GEMM_BF16_DECL

namespace lockstep::cpu::amx_bf16 {
// The AMX kernel with its tile instructions done in C++ (any processor with AVX512-BF16): tests its
// blocking, packing and edges where there is no AMX.
void gemm_bf16_emulated(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                        int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_bf16_emulated(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                        int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc);
}  // namespace lockstep::cpu::amx_bf16
