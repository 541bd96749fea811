// The CPU's one-dimension resampling (tensor/backend.h's ResampleArgs: F::interpolate a dimension at a
// time), forward and backward, for float32, float64, bfloat16 and float16, read and written in their
// dtype with sums in float32 (float64 for float64): one pass each way, no gathered copy of the taps.
// Compiled for x86-64-v3 and for v4 (tensor/cpu/isa.h): call them through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include <cstdint>

#include "tensor/backend.h"
#include "tensor/dtype.h"

#define LOCKSTEP_CPU_RESAMPLE_DECL(isa)                                                               \
  namespace lockstep::cpu::isa {                                                                      \
  /* y [outer, out, inner] = the taps' weighted sums of x [outer, in, inner]. */                     \
  template <typename T>                                                                               \
  void resample(const T* x, T* y, const ResampleArgs& a);                                             \
  /* gx [outer, in, inner] = each gy value times its weight, added at the cells its output read. */  \
  template <typename T>                                                                               \
  void resample_backward(const T* gy, T* gx, const ResampleArgs& a);                                  \
  }
LOCKSTEP_CPU_RESAMPLE_DECL(avx2)
LOCKSTEP_CPU_RESAMPLE_DECL(avx512)
#undef LOCKSTEP_CPU_RESAMPLE_DECL
