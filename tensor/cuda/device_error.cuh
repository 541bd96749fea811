// Device side of IndexError (device_error.h): the checks every data-dependent index and every integer
// divisor go through.
#pragma once

#include <cstdint>

#include "tensor/cuda/device_error.h"

namespace lockstep::cuda::detail {

// Records an error on this device unless one is recorded already: the first reporter wins, and later
// ones leave the record alone (the host raises one error per synchronization).
__device__ inline void record_error(IndexError* rec, IndexErrorKind kind, int64_t position, int64_t value,
                                    int64_t limit) {
  if (atomicCAS(&rec->kind, 0, static_cast<int32_t>(kind)) == 0) {
    rec->position = position;
    rec->value = value;
    rec->limit = limit;
  }
}

// True when 0 <= value < limit; otherwise records the first such index on this device and returns
// false, so that the caller skips the access.
__device__ inline bool index_ok(IndexError* rec, IndexErrorKind kind, int64_t position, int64_t value,
                                int64_t limit) {
  if (value >= 0 && value < limit) return true;
  record_error(rec, kind, position, value, limit);
  return false;
}

// True when an integer divisor is nonzero; otherwise records DivisionByZero (at output element
// `position`, dividing `dividend`) and returns false, so that the caller skips the division.
__device__ inline bool divisor_ok(IndexError* rec, int64_t position, int64_t dividend, int64_t divisor) {
  if (divisor != 0) return true;
  record_error(rec, IndexErrorKind::DivisionByZero, position, dividend, 0);
  return false;
}

}  // namespace lockstep::cuda::detail
