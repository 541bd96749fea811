// The CPU backend's row kernels: softmax and LayerNorm over contiguous rows of n elements, forward
// and backward, split across the intra-op threads by rows. float, double, and bfloat16 and float16
// computed in float32 (statistics in compute_t<T>: float32 for the 16-bit rows). Compiled for
// x86-64-v3 and for v4 (tensor/cpu/isa.h): call them through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

#define LOCKSTEP_CPU_ROWS_DECL(isa)                                                                           \
  namespace lockstep::cpu::isa {                                                                              \
  /* y = softmax(x) (log_softmax when log) of each row. */                                                   \
  template <typename T>                                                                                       \
  void softmax_rows(const T* x, T* y, int64_t rows, int64_t n, bool log);                                     \
  /* gx from the output gradient g and the forward's output y. */                                            \
  template <typename T>                                                                                       \
  void softmax_backward_rows(const T* g, const T* y, T* gx, int64_t rows, int64_t n, bool log);               \
  /* y = (x - mean) * rstd * w + b per row (w, b may be null); the row's mean and rstd are saved. */         \
  template <typename T>                                                                                       \
  void layer_norm_rows(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean, compute_t<T>* rstd,      \
                       int64_t rows, int64_t n, double eps);                                                  \
  /* Gradients of layer_norm_rows; gx, gw, gb may each be null (not wanted). */                              \
  template <typename T>                                                                                       \
  void layer_norm_backward_rows(const T* gy, const T* x, const compute_t<T>* mean, const compute_t<T>* rstd,  \
                                const T* w, T* gx, T* gw, T* gb, int64_t rows, int64_t n);                    \
  }
LOCKSTEP_CPU_ROWS_DECL(avx2)
LOCKSTEP_CPU_ROWS_DECL(avx512)
#undef LOCKSTEP_CPU_ROWS_DECL

namespace lockstep::cpu {

// Rows of work per thread below which a reduction or softmax stays on the calling thread.
constexpr int64_t kRowGrain = 32768;

}  // namespace lockstep::cpu
