// Dtype: the element types lockstep tensors hold, and dispatch from a runtime dtype to C++ code.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "tensor/float16.h"
#include "tensor/host_device.h"

namespace lockstep {

// bfloat16: the upper half of a float32. Stored as such; arithmetic converts to float32 (the ops layer
// computes bfloat16 tensors in float32 and rounds the result back, as PyTorch's CPU kernels do).
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  LOCKSTEP_HOST_DEVICE BFloat16(float f) : bits(round(f)) {}
  LOCKSTEP_HOST_DEVICE operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  // Round to nearest even; NaN stays a (quiet) NaN.
  LOCKSTEP_HOST_DEVICE static uint16_t round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

// float64 exists for gradient checks; int64 holds labels and indices; bool is what comparisons return;
// uint8 holds raw image bytes; bfloat16 and float16 halve the memory of float32 weights, activations and
// the gradients DDP sends; int8, int16 and int32 are the narrower integers data and checkpoints bring
// (token ids, masks, quantized weights), stored and computed as themselves.
enum class Dtype : uint8_t { Float32, Float64, Int64, Bool, UInt8, BFloat16, Float16, Int8, Int16, Int32 };

constexpr Dtype kFloat32 = Dtype::Float32;
constexpr Dtype kFloat64 = Dtype::Float64;
constexpr Dtype kInt64 = Dtype::Int64;
constexpr Dtype kBool = Dtype::Bool;
constexpr Dtype kUInt8 = Dtype::UInt8;
constexpr Dtype kBFloat16 = Dtype::BFloat16;
constexpr Dtype kFloat16 = Dtype::Float16;
constexpr Dtype kInt8 = Dtype::Int8;
constexpr Dtype kInt16 = Dtype::Int16;
constexpr Dtype kInt32 = Dtype::Int32;
// PyTorch's aliases.
constexpr Dtype kFloat = kFloat32;
constexpr Dtype kDouble = kFloat64;
constexpr Dtype kLong = kInt64;
constexpr Dtype kHalf = kFloat16;
constexpr Dtype kByte = kUInt8;
constexpr Dtype kChar = kInt8;
constexpr Dtype kShort = kInt16;
constexpr Dtype kInt = kInt32;

inline size_t element_size(Dtype d) {
  switch (d) {
    case Dtype::Float32:
    case Dtype::Int32: return 4;
    case Dtype::Float64:
    case Dtype::Int64: return 8;
    case Dtype::Bool:
    case Dtype::UInt8:
    case Dtype::Int8: return 1;
    case Dtype::BFloat16:
    case Dtype::Float16:
    case Dtype::Int16: return 2;
  }
  return 0;
}
// The 16-bit floating dtypes: stored as such, computed in float32 (PyTorch's isReducedFloatingType).
inline bool is_reduced_floating_point(Dtype d) { return d == kBFloat16 || d == kFloat16; }
inline bool is_floating_point(Dtype d) { return d == kFloat32 || d == kFloat64 || is_reduced_floating_point(d); }

inline const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "float32";
    case Dtype::Float64: return "float64";
    case Dtype::Int64: return "int64";
    case Dtype::Bool: return "bool";
    case Dtype::UInt8: return "uint8";
    case Dtype::BFloat16: return "bfloat16";
    case Dtype::Float16: return "float16";
    case Dtype::Int8: return "int8";
    case Dtype::Int16: return "int16";
    case Dtype::Int32: return "int32";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, Dtype d) { return os << dtype_name(d); }
// The constant a program names the dtype by, for errors' hints: "kFloat32", "kBFloat16", ...
inline const char* dtype_constant(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "kFloat32";
    case Dtype::Float64: return "kFloat64";
    case Dtype::Int64: return "kInt64";
    case Dtype::Bool: return "kBool";
    case Dtype::UInt8: return "kUInt8";
    case Dtype::BFloat16: return "kBFloat16";
    case Dtype::Float16: return "kFloat16";
    case Dtype::Int8: return "kInt8";
    case Dtype::Int16: return "kInt16";
    case Dtype::Int32: return "kInt32";
  }
  return "?";
}

// The dtype two operands are computed in, by PyTorch's promotion order for tensors:
// bool < uint8, int8 < int16 < int32 < int64 < bfloat16, float16 < float32 < float64; uint8 with int8 is
// int16 and bfloat16 with float16 is float32 (neither holds the other's values).
inline Dtype promote_types(Dtype a, Dtype b) {
  if (is_reduced_floating_point(a) && is_reduced_floating_point(b) && a != b) return kFloat32;
  if ((a == kUInt8 && b == kInt8) || (a == kInt8 && b == kUInt8)) return kInt16;
  auto rank = [](Dtype d) {
    switch (d) {
      case Dtype::Bool: return 0;
      case Dtype::UInt8:
      case Dtype::Int8: return 1;
      case Dtype::Int16: return 2;
      case Dtype::Int32: return 3;
      case Dtype::Int64: return 4;
      case Dtype::BFloat16:
      case Dtype::Float16: return 5;
      case Dtype::Float32: return 6;
      case Dtype::Float64: return 7;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr Dtype value = Dtype::Float32; };
template <> struct dtype_of<double> { static constexpr Dtype value = Dtype::Float64; };
template <> struct dtype_of<int64_t> { static constexpr Dtype value = Dtype::Int64; };
template <> struct dtype_of<bool> { static constexpr Dtype value = Dtype::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr Dtype value = Dtype::UInt8; };
template <> struct dtype_of<BFloat16> { static constexpr Dtype value = Dtype::BFloat16; };
template <> struct dtype_of<Float16> { static constexpr Dtype value = Dtype::Float16; };
template <> struct dtype_of<int8_t> { static constexpr Dtype value = Dtype::Int8; };
template <> struct dtype_of<int16_t> { static constexpr Dtype value = Dtype::Int16; };
template <> struct dtype_of<int32_t> { static constexpr Dtype value = Dtype::Int32; };

template <typename T> struct type_tag { using type = T; };

// Calls fn(type_tag<T>{}) with T the C++ type of `d` (every dtype, bfloat16 and float16 included):
//   dispatch(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <typename Fn>
decltype(auto) dispatch(Dtype d, Fn&& fn) {
  switch (d) {
    case Dtype::Float32: return fn(type_tag<float>{});
    case Dtype::Float64: return fn(type_tag<double>{});
    case Dtype::Int64: return fn(type_tag<int64_t>{});
    case Dtype::Bool: return fn(type_tag<bool>{});
    case Dtype::UInt8: return fn(type_tag<uint8_t>{});
    case Dtype::BFloat16: return fn(type_tag<BFloat16>{});
    case Dtype::Float16: return fn(type_tag<Float16>{});
    case Dtype::Int8: return fn(type_tag<int8_t>{});
    case Dtype::Int16: return fn(type_tag<int16_t>{});
    case Dtype::Int32: return fn(type_tag<int32_t>{});
  }
  fail("dispatch: unknown dtype ", int(d));
}

// The type a kernel computes a T in: bfloat16 and float16 are loaded into float32 registers, computed
// there and rounded once on store (a reduction accumulates in float32 or wider); every other dtype is
// computed in itself. Kernels that dispatch with `dispatch` (all dtypes) and compute in compute_t<T>
// take 16-bit tensors as they are; the ones that still dispatch with dispatch_compute below leave the
// ops layer to give them float32 copies.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<BFloat16> { using type = float; };
template <> struct compute_type<Float16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

// As dispatch, over the dtypes that are their own compute type (no bfloat16, no float16: the caller's
// kernels have no 16-bit rows yet, and the ops layer gives them float32 copies); `op` names the caller
// in the error.
template <typename Fn>
decltype(auto) dispatch_compute(Dtype d, const char* op, Fn&& fn) {
  switch (d) {
    case Dtype::Float32: return fn(type_tag<float>{});
    case Dtype::Float64: return fn(type_tag<double>{});
    case Dtype::Int64: return fn(type_tag<int64_t>{});
    case Dtype::Bool: return fn(type_tag<bool>{});
    case Dtype::UInt8: return fn(type_tag<uint8_t>{});
    case Dtype::Int8: return fn(type_tag<int8_t>{});
    case Dtype::Int16: return fn(type_tag<int16_t>{});
    case Dtype::Int32: return fn(type_tag<int32_t>{});
    default: fail(op, ": no kernel for ", dtype_name(d));
  }
}

// As dispatch, for kernels defined only on float32/float64; `op` names the caller.
template <typename Fn>
decltype(auto) dispatch_floating(Dtype d, const char* op, Fn&& fn) {
  switch (d) {
    case Dtype::Float32: return fn(type_tag<float>{});
    case Dtype::Float64: return fn(type_tag<double>{});
    default: fail(op, ": expected a float32 or float64 tensor, got ", dtype_name(d));
  }
}

}  // namespace lockstep
