// The CPU backend's elementwise kernels (tensor/backend.h states their contract) on raw data: `out`
// and the operands are tensors' data pointers, of dtype `dt` unless named otherwise. Compiled for
// x86-64-v3 and for v4 (tensor/cpu/isa.h): call them through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include "tensor/backend.h"

#define LOCKSTEP_CPU_ELEMENTWISE_DECL(isa)                                                               \
  namespace lockstep::cpu::isa {                                                                         \
  void fill(const StridedPlan& p, Dtype dt, void* out, double value);                                    \
  void copy_(const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt, const void* a);                  \
  void unary(UnaryOp op, const OpScalars& s, const StridedPlan& p, void* out, Dtype dt, const void* a);  \
  /* a and b of one dtype, or a 16-bit one beside float32 (out float32, or the 16-bit dtype) */          \
  void binary(BinaryOp op, const OpScalars& s, const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt, \
              const void* a, Dtype b_dt, const void* b);                                                 \
  void where(const StridedPlan& p, void* out, Dtype dt, const bool* cond, const void* a, const void* b); \
  }
LOCKSTEP_CPU_ELEMENTWISE_DECL(avx2)
LOCKSTEP_CPU_ELEMENTWISE_DECL(avx512)
#undef LOCKSTEP_CPU_ELEMENTWISE_DECL
