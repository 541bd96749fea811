// The CPU backend's batch-norm kernels over x [N, C, inner] (tensor/backend.h states the rules): each
// (n, c) plane of `inner` values is contiguous, so every loop runs along a plane with the plane's
// channel constants hoisted. float, double, and bfloat16 and float16 read and written as they are
// (compute_t: each value computed in float32 and rounded once; the weight and bias in float32, as the
// ops layer passes them); statistics in double. Compiled for x86-64-v3 and for v4 (tensor/cpu/isa.h):
// call them through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

#define LOCKSTEP_CPU_BATCH_NORM_DECL(isa)                                                                     \
  namespace lockstep::cpu::isa {                                                                              \
  /* sums [2, C]: sum of x and of x^2 per channel; threads take channels. */                                 \
  template <typename T>                                                                                       \
  void batch_norm_stats(const T* x, double* sums, int64_t N, int64_t C, int64_t inner);                       \
  /* y = x * a + b, a = invstd * w, b = bias - mean * a (w, b may be null); threads take planes. */          \
  template <typename T>                                                                                       \
  void batch_norm_elemt(const T* x, const double* mean, const double* invstd, const compute_t<T>* w,         \
                        const compute_t<T>* b, T* y,                                                         \
                        int64_t N, int64_t C, int64_t inner);                                                 \
  /* sums [2, C]: sum of gy and of gy * (x - mean) per channel. */                                           \
  template <typename T>                                                                                       \
  void batch_norm_backward_reduce(const T* gy, const T* x, const double* mean, double* sums, int64_t N,        \
                                  int64_t C, int64_t inner);                                                  \
  /* gx from gy, x, the statistics and the (all-reduced) sums over count values; sums may be null (0). */   \
  template <typename T>                                                                                       \
  void batch_norm_backward_elemt(const T* gy, const T* x, const double* mean, const double* invstd,          \
                                 const compute_t<T>* w,                                                     \
                                 const double* sums, double count, T* gx, int64_t N, int64_t C, int64_t inner); \
  }
LOCKSTEP_CPU_BATCH_NORM_DECL(avx2)
LOCKSTEP_CPU_BATCH_NORM_DECL(avx512)
#undef LOCKSTEP_CPU_BATCH_NORM_DECL
