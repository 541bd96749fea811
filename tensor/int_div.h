// Integer division as both backends compute it (the CPU's BinaryFn and the CUDA kernels'
// binary_fn), so that they agree bit for bit, and the error both raise for a zero divisor (which the
// caller rejects first).
#pragma once

#include <type_traits>

#include "tensor/host_device.h"

namespace lockstep::detail {

// What both backends raise for an integer (int64 or uint8) divisor of 0 (the CPU before the op, a GPU at the next
// synchronization), so the mistake reads the same on either.
inline constexpr char kIntegerDivisionByZero[] =
    "div: integer division by zero (a divisor element is 0; divide floating-point tensors for inf/nan)";

// x / y truncated toward zero, as C++. INT64_MIN / -1 overflows, and x86 traps on it (SIGFPE): it wraps
// to INT64_MIN instead, as NumPy answers; for every other x, x / -1 is -x.
template <typename T>
LOCKSTEP_HOST_DEVICE constexpr T int_div(T x, T y) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  if constexpr (std::is_signed_v<T>) {
    if (y == T(-1)) return static_cast<T>(U{0} - static_cast<U>(x));
  }
  return x / y;
}

}  // namespace lockstep::detail
