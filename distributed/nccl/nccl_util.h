// NCCL's names for lockstep's dtypes and reduce ops, and the checked-call macro: shared by
// ProcessGroupNCCL and allreduce_bench's raw-NCCL baseline. Only where NCCL is found.
#pragma once

#include <nccl.h>

#include "distributed/work.h"
#include "common/check.h"
#include "tensor/dtype.h"

namespace lockstep::dist::detail {

inline ncclDataType_t nccl_dtype(Dtype d) {
  switch (d) {
    case Dtype::Float32: return ncclFloat32;
    case Dtype::Float64: return ncclFloat64;
    case Dtype::Int64: return ncclInt64;
    case Dtype::BFloat16: return ncclBfloat16;  // reduced in float32 inside NCCL's kernels
    case Dtype::Float16: return ncclFloat16;
    case Dtype::Int32: return ncclInt32;
    case Dtype::Int8: return ncclInt8;
    case Dtype::UInt8: return ncclUint8;
    case Dtype::Bool:
    case Dtype::Int16: break;  // NCCL has no 16-bit integer and no bool
  }
  fail("NCCL: unsupported dtype ", dtype_name(d),
       " (float32, float64, bfloat16, float16, int64, int32, int8 and uint8 are supported)");
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return ncclSum;
    case ReduceOp::AVG: return ncclAvg;
    case ReduceOp::MIN: return ncclMin;
    case ReduceOp::MAX: return ncclMax;
    case ReduceOp::PRODUCT: return ncclProd;
  }
  fail("NCCL: unknown reduce op ", int(op));
}

}  // namespace lockstep::dist::detail

// Throws naming `who`, the operation `op`, the call and NCCL's error string.
#define LOCKSTEP_NCCL_CALL(who, call, op)                                                                     \
  do {                                                                                                        \
    ncclResult_t res_ = (call);                                                                               \
    if (res_ != ncclSuccess && res_ != ncclInProgress)                                                        \
      ::lockstep::fail(who, ": ", op, ": ", #call, " failed: ", ncclGetErrorString(res_));                   \
  } while (0)
