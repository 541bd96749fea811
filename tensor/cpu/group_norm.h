// The CPU backend's GroupNorm kernels over x [N, C, HW] in G groups (tensor/backend.h states the rules):
// each (n, g) is C / G * HW contiguous values, so threads take whole groups and every loop runs along
// one channel's HW values with that channel's constants hoisted. float, double, and bfloat16 and
// float16 read and written as they are (each value computed in float32 and rounded once; mean and rstd
// float32); statistics and sums in double, as LayerNorm's and BatchNorm's. Compiled for x86-64-v3 and
// for v4 (tensor/cpu/isa.h): call them through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

#define LOCKSTEP_CPU_GROUP_NORM_DECL(isa)                                                                     \
  namespace lockstep::cpu::isa {                                                                              \
  /* y = (x - mean) * rstd * w[c] + b[c] (w, b may be null); mean and rstd [N, G] saved. */                  \
  template <typename T>                                                                                       \
  void group_norm(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean, compute_t<T>* rstd,          \
                  int64_t N, int64_t C, int64_t HW, int64_t G, double eps);                                   \
  /* Its gradients; gx, gw, gb may each be null (not wanted), w too (1). */                                  \
  template <typename T>                                                                                       \
  void group_norm_backward(const T* gy, const T* x, const compute_t<T>* mean, const compute_t<T>* rstd,      \
                           const T* w, T* gx, T* gw, T* gb, int64_t N, int64_t C, int64_t HW, int64_t G);     \
  }
LOCKSTEP_CPU_GROUP_NORM_DECL(avx2)
LOCKSTEP_CPU_GROUP_NORM_DECL(avx512)
#undef LOCKSTEP_CPU_GROUP_NORM_DECL
