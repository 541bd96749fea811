// The CPU's average pooling of float32, bfloat16 and float16 planes (tensor/backend.h's AvgPool2dArgs),
// forward and backward, read and written in their dtype with float32 sums: no float32 copy of a 16-bit
// input, no padded copy. Compiled for x86-64-v3 and for v4 (tensor/cpu/isa.h): call them through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include <cstdint>

#include "tensor/backend.h"
#include "tensor/dtype.h"

#define LOCKSTEP_CPU_AVG_POOL_DECL(isa)                                                                   \
  namespace lockstep::cpu::isa {                                                                          \
  /* y [planes, OH, OW] = each window's mean of x [planes, H, W]; T is float, BFloat16 or Float16. */           \
  template <typename T>                                                                                   \
  void avg_pool2d_planes(const T* x, T* y, const AvgPool2dArgs& a);                                       \
  /* gx [planes, H, W] = the sum of the shares gy / count of the windows that cover each cell. */        \
  template <typename T>                                                                                   \
  void avg_pool2d_backward_planes(const T* gy, T* gx, const AvgPool2dArgs& a);                            \
  }
LOCKSTEP_CPU_AVG_POOL_DECL(avx2)
LOCKSTEP_CPU_AVG_POOL_DECL(avx512)
#undef LOCKSTEP_CPU_AVG_POOL_DECL
