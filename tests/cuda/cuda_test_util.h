// What the CUDA tests share: whether a device is visible (a GPU, or the emulator under
// --config=cudaemu), the one "SKIPPED: no CUDA device" line CI counts as a skip, and REQUIRE_DEVICE()
// for a case that needs a device.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>

#include "tensor/cuda/cuda.h"

namespace lockstep::testing {

// Decided (and the skip announced) once, as the binary starts, so the line appears even when no case
// asks.
inline const bool kHaveCudaDevice = [] {
  const bool have = cuda::device_count() > 0;
  if (!have) std::printf("SKIPPED: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
  return have;
}();

}  // namespace lockstep::testing

// Ends the current case with a message when no CUDA device is visible.
#define REQUIRE_DEVICE()                              \
  do {                                                \
    if (!::lockstep::testing::kHaveCudaDevice) {      \
      MESSAGE("no CUDA device visible: skipped");     \
      return;                                         \
    }                                                 \
  } while (0)
