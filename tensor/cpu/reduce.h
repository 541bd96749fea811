// The CPU's reductions: every row of tensor/reduce_ops.h over the middle dimension of a contiguous
// [outer, n, inner], by the row's rule. Compiled for x86-64-v3 and for v4 (tensor/cpu/isa.h): call it
// through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/reduce_ops.h"

#define LOCKSTEP_CPU_REDUCE_DECL(isa)                                                                   \
  namespace lockstep::cpu::isa {                                                                        \
  /* out [outer, inner] (int64 for index rows, else x's dtype) = op over n of x [outer, n, inner]. */   \
  void reduce(Reduction op, Dtype dtype, const void* x, void* out, int64_t outer, int64_t n, int64_t inner); \
  }
LOCKSTEP_CPU_REDUCE_DECL(avx2)
LOCKSTEP_CPU_REDUCE_DECL(avx512)
#undef LOCKSTEP_CPU_REDUCE_DECL
