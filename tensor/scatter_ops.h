// The scatters that are not adds (scatter_add has its own kernel), in one table read by the ops layer
// (tensor/indexing.cpp: names, dtypes), the CPU loop (tensor/cpu/index.cpp) and the CUDA kernel
// (tensor/cuda/indexing.cu) alike, as scan_ops.h is for scans. Each row is (Name, "op", dtypes) and
// names a rule rule::ScatterName<C> below, defined once for host and device: apply(old, v) is the
// destination's new value when v is scattered onto old, both in compute_t<T> (a 16-bit destination is
// rounded once per scattered element, as scatter_add's adds). "op" is the public op whose index errors
// the row reports.
//
// Order: the CPU applies the elements in index order; CUDA applies them atomically in any order. The
// rules other than Assign are commutative and associative (up to rounding for a floating product), so
// the devices agree; Assign with a repeated index keeps an unspecified one of its values, as PyTorch's
// scatter_ (whose documentation says so).
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/check.h"
#include "tensor/elementwise_ops.h"
#include "tensor/host_device.h"

namespace lockstep {

#define LOCKSTEP_SCATTERS(X)                            \
  X(Assign, "scatter_", OpDtypes::kAll)                 \
  X(Multiply, "scatter_reduce_", OpDtypes::kNumeric)    \
  X(Amax, "scatter_reduce_", OpDtypes::kNumeric)        \
  X(Amin, "scatter_reduce_", OpDtypes::kNumeric)

#define LOCKSTEP_SCATTER_ENUM(Name, str, kinds) Name,
enum class Scatter : uint8_t { LOCKSTEP_SCATTERS(LOCKSTEP_SCATTER_ENUM) };
#undef LOCKSTEP_SCATTER_ENUM

namespace rule {

template <typename C>
struct ScatterAssign {
  LOCKSTEP_HOST_DEVICE static C apply(C, C v) { return v; }
};

// Integer products wrap (two's complement), as PyTorch's, instead of overflowing signed arithmetic.
template <typename C>
struct ScatterMultiply {
  LOCKSTEP_HOST_DEVICE static C apply(C old, C v) {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<uint64_t>(old) * static_cast<uint64_t>(v));
    } else {
      return old * v;
    }
  }
};

// PyTorch's scatter_reduce amax / amin: a NaN, once there or scattered, stays.
template <typename C>
struct ScatterAmax {
  LOCKSTEP_HOST_DEVICE static C apply(C old, C v) { return fn::is_nan(old) ? old : fn::max_nan(old, v); }
};
template <typename C>
struct ScatterAmin {
  LOCKSTEP_HOST_DEVICE static C apply(C old, C v) { return fn::is_nan(old) ? old : fn::min_nan(old, v); }
};

}  // namespace rule

// The rule of row S computing in C.
template <Scatter S, typename C>
struct ScatterRuleOf;
#define LOCKSTEP_SCATTER_RULE(Name, str, kinds) \
  template <typename C>                         \
  struct ScatterRuleOf<Scatter::Name, C> {      \
    using type = rule::Scatter##Name<C>;        \
  };
LOCKSTEP_SCATTERS(LOCKSTEP_SCATTER_RULE)
#undef LOCKSTEP_SCATTER_RULE
template <Scatter S, typename C>
using ScatterRule = typename ScatterRuleOf<S, C>::type;

// The public op a row's errors name.
inline const char* scatter_name(Scatter op) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case Scatter::Name: return str;
    LOCKSTEP_SCATTERS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  return "scatter_";
}

// f(std::integral_constant<Scatter, S>, std::integral_constant<OpDtypes, dtypes>): the runtime row as
// compile-time constants, so a backend instantiates its loop once per row.
template <typename F>
decltype(auto) visit_scatter(Scatter op, F&& f) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case Scatter::Name:                   \
    return f(std::integral_constant<Scatter, Scatter::Name>{}, std::integral_constant<OpDtypes, kinds>{});
    LOCKSTEP_SCATTERS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  fail("scatter: unknown scatter ", int(op));
}

}  // namespace lockstep
