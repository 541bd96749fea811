// The elementwise rows on the integers and bool (tensor/cpu/elementwise_families.h), compiled once per
// ISA (tensor/cpu/isa.h).
#include "tensor/cpu/elementwise_families.h"
#include "tensor/cpu/isa.h"

LOCKSTEP_ISA_BEGIN

#define LOCKSTEP_ELEMENTWISE_INSTANTIATE(T)                                                        \
  template void unary_same<T>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*); \
  template void binary_same<T>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);
LOCKSTEP_ELEMENTWISE_INSTANTIATE(int64_t)
LOCKSTEP_ELEMENTWISE_INSTANTIATE(int32_t)
LOCKSTEP_ELEMENTWISE_INSTANTIATE(int16_t)
LOCKSTEP_ELEMENTWISE_INSTANTIATE(int8_t)
LOCKSTEP_ELEMENTWISE_INSTANTIATE(uint8_t)
LOCKSTEP_ELEMENTWISE_INSTANTIATE(bool)
#undef LOCKSTEP_ELEMENTWISE_INSTANTIATE

LOCKSTEP_ISA_END
