// Integer division as both backends compute it (the CPU's BinaryFn and the CUDA kernels'
// binary_fn), so that they agree bit for bit. A zero divisor is the caller's to reject first.
#pragma once

#include <type_traits>

#ifdef __CUDACC__
#define LOCKSTEP_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_HOST_DEVICE
#endif

namespace lockstep::detail {

// x / y truncated toward zero, as C++. INT64_MIN / -1 overflows, and x86 traps on it (SIGFPE): it wraps
// to INT64_MIN instead, as NumPy answers; for every other x, x / -1 is -x.
template <typename T>
LOCKSTEP_HOST_DEVICE constexpr T int_div(T x, T y) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  if (y == T(-1)) return static_cast<T>(U{0} - static_cast<U>(x));
  return x / y;
}

}  // namespace lockstep::detail
