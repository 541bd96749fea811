// The CPU's elementwise kernels by dtype family, each family its own translation unit (per ISA build,
// tensor/cpu/isa.h) so that the build compiles them side by side: elementwise.cpp takes the calls
// (tensor/cpu/elementwise.h) and hands each to its family.
//   elementwise_floating.cpp  float32, float64: every row instantiated for the dtype, in strided_loop.h
//   elementwise_integral.cpp  int64, int32, int16, int8, uint8, bool: the same
//   elementwise_half.cpp      bfloat16, float16, and either beside float32: no instantiation per dtype;
//                             the operands are converted to float32 in blocks (float_blocks.h), the
//                             row's float32 loop runs on the blocks, and the result is rounded once on
//                             store, so a 16-bit tensor is still read and written at 16 bits.
#pragma once

#include <cstdint>

#include "tensor/backend.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/strided_loop.h"

LOCKSTEP_ISA_BEGIN

// Operands (and the output, unless the row returns bool) of the one dtype T, a dtype that is its own
// compute type. Defined here, instantiated once per dtype in its family's file (the extern templates
// below keep every other includer from compiling them again).
template <typename T>
void unary_same(UnaryOp op, const OpScalars& s, const StridedPlan& p, void* out, const void* a) {
  visit_op(op, s, [&](auto f, auto kinds) {
    if constexpr (op_accepts<decltype(kinds)::value, T>()) {
      using R = decltype(f(T{}));
      strided_apply(p, f, static_cast<R*>(out), static_cast<const T*>(a));
    } else {
      fail(op_name(op), ": not defined for ", dtype_of<T>::value);
    }
  });
}
template <typename T>
void binary_same(BinaryOp op, const OpScalars& s, const StridedPlan& p, void* out, const void* a, const void* b) {
  visit_op(op, s, [&](auto f, auto kinds) {
    if constexpr (op_accepts<decltype(kinds)::value, T>()) {
      using R = decltype(f(T{}, T{}));
      strided_apply(p, f, static_cast<R*>(out), static_cast<const T*>(a), static_cast<const T*>(b));
    } else {
      fail(op_name(op), ": not defined for ", dtype_of<T>::value);
    }
  });
}
#define LOCKSTEP_ELEMENTWISE_EXTERN(T)                                                   \
  extern template void unary_same<T>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*); \
  extern template void binary_same<T>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, \
                                      const void*);
LOCKSTEP_ELEMENTWISE_EXTERN(float)
LOCKSTEP_ELEMENTWISE_EXTERN(double)
LOCKSTEP_ELEMENTWISE_EXTERN(int64_t)
LOCKSTEP_ELEMENTWISE_EXTERN(uint8_t)
LOCKSTEP_ELEMENTWISE_EXTERN(bool)
LOCKSTEP_ELEMENTWISE_EXTERN(int8_t)
LOCKSTEP_ELEMENTWISE_EXTERN(int16_t)
LOCKSTEP_ELEMENTWISE_EXTERN(int32_t)
#undef LOCKSTEP_ELEMENTWISE_EXTERN

// elementwise_half.cpp: a bfloat16 or float16 operand, alone, with one of its dtype, or beside a float32
// one; out of the 16-bit dtype, float32, or bool (comparisons). copy_half converts between any dtype
// and a 16-bit one.
void unary_half(UnaryOp op, const OpScalars& s, const StridedPlan& p, void* out, Dtype dt, const void* a);
void binary_half(BinaryOp op, const OpScalars& s, const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt,
                 const void* a, Dtype b_dt, const void* b);
void copy_half(const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt, const void* a);

LOCKSTEP_ISA_END
