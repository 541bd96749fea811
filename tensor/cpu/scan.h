// The CPU's scans: every row of tensor/scan_ops.h along the middle dimension of a contiguous
// [outer, n, inner], by the row's rule. Compiled for x86-64-v3 and for v4 (tensor/cpu/isa.h): call it
// through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/scan_ops.h"

#define LOCKSTEP_CPU_SCAN_DECL(isa)                                                                     \
  namespace lockstep::cpu::isa {                                                                        \
  /* out [outer, n, inner] (x's dtype) = op along n of x, from the end with reverse; index rows also */ \
  /* write int64 positions into indices (null for the others). */                                      \
  void scan(Scan op, Dtype dtype, const void* x, void* out, int64_t* indices, int64_t outer, int64_t n, \
            int64_t inner, bool reverse);                                                               \
  }
LOCKSTEP_CPU_SCAN_DECL(avx2)
LOCKSTEP_CPU_SCAN_DECL(avx512)
#undef LOCKSTEP_CPU_SCAN_DECL
