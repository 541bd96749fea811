// Dtype: the element types lockstep tensors hold, and dispatch from a runtime dtype to C++ code.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "common/check.h"

namespace lockstep {

// float64 exists for gradient checks; int64 holds labels and indices.
enum class Dtype : uint8_t { Float32, Float64, Int64 };

constexpr Dtype kFloat32 = Dtype::Float32;
constexpr Dtype kFloat64 = Dtype::Float64;
constexpr Dtype kInt64 = Dtype::Int64;

inline size_t element_size(Dtype d) { return d == Dtype::Float32 ? 4 : 8; }
inline bool is_floating_point(Dtype d) { return d != Dtype::Int64; }

inline const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "float32";
    case Dtype::Float64: return "float64";
    case Dtype::Int64: return "int64";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, Dtype d) { return os << dtype_name(d); }

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr Dtype value = Dtype::Float32; };
template <> struct dtype_of<double> { static constexpr Dtype value = Dtype::Float64; };
template <> struct dtype_of<int64_t> { static constexpr Dtype value = Dtype::Int64; };

template <typename T> struct type_tag { using type = T; };

// Calls fn(type_tag<T>{}) with T the C++ type of `d`:
//   dispatch(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <typename Fn>
decltype(auto) dispatch(Dtype d, Fn&& fn) {
  switch (d) {
    case Dtype::Float32: return fn(type_tag<float>{});
    case Dtype::Float64: return fn(type_tag<double>{});
    case Dtype::Int64: return fn(type_tag<int64_t>{});
  }
  fail("dispatch: unknown dtype ", int(d));
}

// As dispatch, for kernels defined only on floating-point types; `op` names the caller.
template <typename Fn>
decltype(auto) dispatch_floating(Dtype d, const char* op, Fn&& fn) {
  switch (d) {
    case Dtype::Float32: return fn(type_tag<float>{});
    case Dtype::Float64: return fn(type_tag<double>{});
    default: fail(op, ": expected a floating-point tensor, got ", dtype_name(d));
  }
}

}  // namespace lockstep
