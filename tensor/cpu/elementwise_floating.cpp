// The elementwise rows on float32 and float64 (tensor/cpu/elementwise_families.h), compiled once per ISA
// (tensor/cpu/isa.h).
#include "tensor/cpu/elementwise_families.h"
#include "tensor/cpu/isa.h"

LOCKSTEP_ISA_BEGIN

template void unary_same<float>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*);
template void binary_same<float>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);
template void unary_same<double>(UnaryOp, const OpScalars&, const StridedPlan&, void*, const void*);
template void binary_same<double>(BinaryOp, const OpScalars&, const StridedPlan&, void*, const void*, const void*);

LOCKSTEP_ISA_END
