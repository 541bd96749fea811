// The bfloat16 GEMM kernels behind cpu::gemm's bfloat16 overloads (tensor/cpu/gemm.h): bfloat16 A and
// B, float32 accumulation, C float32 or bfloat16. One thread each, arguments checked by gemm.cpp, m, n,
// k > 0. Chosen at run time (tensor/cpu/isa.h):
// - avx512_bf16: vdpbf16ps on VNNI-packed B (gemm_bf16_avx512.cpp), where the CPU has AVX512-BF16.
// - fallback: blocks of the operands converted to float32 for the float32 GEMM (gemm_bf16.cpp).
// - AMX (TDPBF16PS tiles) would be a third row here, chosen where use_amx_bf16(); not written: no
//   processor this project tests on has AMX.
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
LOCKSTEP_CPU_GEMM_BF16_DECL(avx512_bf16)
LOCKSTEP_CPU_GEMM_BF16_DECL(bf16_fallback)
#undef LOCKSTEP_CPU_GEMM_BF16_DECL
