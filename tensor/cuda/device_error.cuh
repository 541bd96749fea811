// Device side of IndexError (device_error.h): the check every data-dependent index goes through.
#pragma once

#include <cstdint>

#include "tensor/cuda/device_error.h"

namespace lockstep::cuda::detail {

// True when 0 <= value < limit; otherwise records the first such index on this device and returns
// false, so that the caller skips the access.
__device__ inline bool index_ok(IndexError* rec, IndexErrorKind kind, int64_t position, int64_t value,
                                int64_t limit) {
  if (value >= 0 && value < limit) return true;
  if (atomicCAS(&rec->kind, 0, static_cast<int32_t>(kind)) == 0) {
    rec->position = position;
    rec->value = value;
    rec->limit = limit;
  }
  return false;
}

}  // namespace lockstep::cuda::detail
