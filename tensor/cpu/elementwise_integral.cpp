// The elementwise rows on the integers and bool (tensor/cpu/elementwise_families.h), compiled once per
// ISA (tensor/cpu/isa.h).
#include "tensor/cpu/elementwise_families.h"
#include "tensor/cpu/isa.h"

LOCKSTEP_ISA_BEGIN

template void unary_same<int64_t>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*);
template void binary_same<int64_t>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);
template void unary_same<uint8_t>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*);
template void binary_same<uint8_t>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);
template void unary_same<bool>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*);
template void binary_same<bool>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);
template void unary_same<int8_t>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*);
template void binary_same<int8_t>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);
template void unary_same<int16_t>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*);
template void binary_same<int16_t>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);
template void unary_same<int32_t>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*);
template void binary_same<int32_t>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);

LOCKSTEP_ISA_END
