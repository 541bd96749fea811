// The CPU's fused attention (tensor/attention.h's op, tensor/attention_ops.h's rules), float32, float64,
// bfloat16 and float16 (computed in attention_acc_t<T>: float32 for the 16-bit types): FlashAttention-2
// over tiles of query rows and key columns, compiled for x86-64-v3 and v4 (tensor/cpu/isa.h): call them
// through LOCKSTEP_CPU_ISA_CALL. bfloat16 has a third build where the CPU has AVX512-BF16 (vdpbf16ps
// tile products), namespace avx512_bf16. `mask` is bool or attention_acc_t<T> by args.mask_kind.
#pragma once

#include <cstdint>

#include "tensor/attention_ops.h"

namespace lockstep {
struct BFloat16;
}

#define LOCKSTEP_CPU_ATTENTION_DECL(isa)                                                                     \
  namespace lockstep::cpu::isa {                                                                             \
  /* out and lse [B, Hq, L] (contiguous) from q, k, v. */                                                    \
  template <typename T>                                                                                      \
  void attention_forward(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, T* out, \
                         attention_acc_t<T>* lse);                                                           \
  /* dq (zero on entry), dk and dv from grad_out, given the forward's out and lse. */                        \
  template <typename T>                                                                                      \
  void attention_backward(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask,       \
                          const T* out, const attention_acc_t<T>* lse, const T* grad_out, T* dq, T* dk,      \
                          T* dv);                                                                            \
  }
LOCKSTEP_CPU_ATTENTION_DECL(avx2)
LOCKSTEP_CPU_ATTENTION_DECL(avx512)
#undef LOCKSTEP_CPU_ATTENTION_DECL

namespace lockstep::cpu::avx512_bf16 {
// bfloat16 attention with vdpbf16ps tile products (attention_bf16_avx512.cpp): only where
// use_avx512_bf16(), and for even head sizes E and Ev (a pair of bfloat16 is what vdpbf16ps reads).
bool attention_applies(const AttentionArgs& a);
void attention_forward(const AttentionArgs& a, const BFloat16* q, const BFloat16* k, const BFloat16* v,
                       const void* mask, BFloat16* out, float* lse);
void attention_backward(const AttentionArgs& a, const BFloat16* q, const BFloat16* k, const BFloat16* v,
                        const void* mask, const BFloat16* out, const float* lse, const BFloat16* grad_out,
                        BFloat16* dq, BFloat16* dk, BFloat16* dv);
}  // namespace lockstep::cpu::avx512_bf16
