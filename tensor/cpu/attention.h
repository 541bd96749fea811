// The CPU's fused attention (tensor/attention.h's op, tensor/attention_ops.h's rules), float and
// double: FlashAttention-2 over tiles of query rows and key columns, compiled for x86-64-v3 and v4
// (tensor/cpu/isa.h): call them through LOCKSTEP_CPU_ISA_CALL. `mask` is bool or T by args.mask_kind.
#pragma once

#include <cstdint>

#include "tensor/attention_ops.h"

#define LOCKSTEP_CPU_ATTENTION_DECL(isa)                                                                     \
  namespace lockstep::cpu::isa {                                                                             \
  /* out and lse [B, Hq, L] (contiguous) from q, k, v. */                                                    \
  template <typename T>                                                                                      \
  void attention_forward(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, T* out, \
                         T* lse);                                                                            \
  /* dq (zero on entry), dk and dv from grad_out, given the forward's out and lse. */                        \
  template <typename T>                                                                                      \
  void attention_backward(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask,       \
                          const T* out, const T* lse, const T* grad_out, T* dq, T* dk, T* dv);               \
  }
LOCKSTEP_CPU_ATTENTION_DECL(avx2)
LOCKSTEP_CPU_ATTENTION_DECL(avx512)
#undef LOCKSTEP_CPU_ATTENTION_DECL
