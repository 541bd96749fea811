// The scans (cumulative ops), in one table read by the ops layer (tensor/scan.cpp: names, dtype rules),
// the CPU loops (tensor/cpu/scan.cpp) and the CUDA kernel (tensor/cuda/scan.cu) alike, as
// reduce_ops.h is for reductions. Each row is (Name, "name", dtypes) and names a rule rule::Name<T>
// below, defined once for host and device. A new scan is one row, one rule, its autograd rule
// (autograd/scan.cpp) and tests; no backend changes.
//
// A rule says how to scan n elements of T in order: Acc (the running state), lift(v, k) (the state
// after the first element, v at position k), next(acc, v, k) (the state after v) and finish(acc) (the
// output there, a T); rows with kIndex also give index(acc), the int64 position of the running extreme.
// Both devices walk each column in order, so a rule needs no identity and no associative combine
// (a parallel scan would; PyTorch's CPU scans are sequential too, which the rules below copy).
//
// The accumulation rule, PyTorch's on the CPU (at::acc_type<T, /*is_cuda=*/false>), the same on both
// devices: float32 and float64 accumulate in double, bfloat16 and float16 in float32, integers in
// int64 (wrapping); each output rounds the running value once. cummax and cummin compare in
// compute_t<T>, where a 16-bit value is exact.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/check.h"
#include "tensor/elementwise_ops.h"
#include "tensor/host_device.h"

namespace lockstep {

// X(Name, "name", dtypes). The kNumeric rows (a sum, a product) take bool and integer inputs as int64,
// PyTorch's rule: the ops layer converts, so their kernels see floating types, int64 and (with an
// explicit dtype) uint8.
#define LOCKSTEP_SCANS(X)                              \
  X(Cumsum, "cumsum", OpDtypes::kNumeric)              \
  X(Cumprod, "cumprod", OpDtypes::kNumeric)            \
  X(Logcumsumexp, "logcumsumexp", OpDtypes::kFloating) \
  X(Cummax, "cummax", OpDtypes::kAll)                  \
  X(Cummin, "cummin", OpDtypes::kAll)

#define LOCKSTEP_SCAN_ENUM(Name, str, kinds) Name,
enum class Scan : uint8_t { LOCKSTEP_SCANS(LOCKSTEP_SCAN_ENUM) };
#undef LOCKSTEP_SCAN_ENUM

namespace rule {

template <typename T>
using ScanAcc = std::conditional_t<std::is_floating_point_v<T>, double,
                                   std::conditional_t<std::is_floating_point_v<compute_t<T>>, float, int64_t>>;

// Integer sums and products wrap (two's complement), as PyTorch's, instead of overflowing signed
// arithmetic.
template <typename Acc, bool kMul>
LOCKSTEP_HOST_DEVICE Acc arith(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    const uint64_t x = static_cast<uint64_t>(a), y = static_cast<uint64_t>(b);
    return static_cast<Acc>(kMul ? x * y : x + y);
  } else {
    return kMul ? a * b : a + b;
  }
}

template <typename T, bool kMul>
struct Running {
  using Acc = ScanAcc<T>;
  static constexpr bool kIndex = false;
  LOCKSTEP_HOST_DEVICE static Acc lift(T v, int64_t) { return static_cast<Acc>(v); }
  LOCKSTEP_HOST_DEVICE static Acc next(Acc a, T v, int64_t) { return arith<Acc, kMul>(a, static_cast<Acc>(v)); }
  LOCKSTEP_HOST_DEVICE static T finish(Acc a) { return static_cast<T>(a); }
};

template <typename T>
struct Cumsum : Running<T, false> {};
template <typename T>
struct Cumprod : Running<T, true> {};

// log(exp(a) + exp(v)) by PyTorch's _log_add_exp_helper: the larger one plus log1p(exp(smaller -
// larger)), which never overflows; NaN propagates; two equal infinities give that infinity (-inf + -inf
// stays -inf, where log1p(exp(-inf - -inf)) would be NaN). lift(v) = v is the helper's value from the
// -inf start PyTorch uses, for every v.
template <typename T>
struct Logcumsumexp {
  using Acc = ScanAcc<T>;
  static constexpr bool kIndex = false;
  LOCKSTEP_HOST_DEVICE static Acc lift(T v, int64_t) { return static_cast<Acc>(v); }
  LOCKSTEP_HOST_DEVICE static Acc next(Acc a, T v, int64_t) {
    const Acc x = static_cast<Acc>(v);
    // std::min(x, a) and std::max(x, a), a NaN a taking both: as the helper, so x's NaN reaches the sum.
    const Acc lo = fn::is_nan(a) ? a : (a < x ? a : x);
    const Acc hi = fn::is_nan(a) ? a : (x < a ? a : x);
    if (lo != hi || !(fn::is_nan(lo) || fn::is_inf(lo))) return math::log1p(math::exp(lo - hi)) + hi;
    return x;
  }
  LOCKSTEP_HOST_DEVICE static T finish(Acc a) { return static_cast<T>(a); }
};

// The running extreme and its position: PyTorch's cummax_cummin_helper, where ties go to the later
// element (>=, <=) and a NaN always takes over, so after a NaN the value stays NaN and the index is the
// latest NaN's. Trivial, so it can live in registers on the device.
template <typename C>
struct RunningArg {
  C value;
  int64_t index;
};

template <typename T, bool kMax>
struct RunningExtreme {
  using C = compute_t<T>;
  using Acc = RunningArg<C>;
  static constexpr bool kIndex = true;
  LOCKSTEP_HOST_DEVICE static Acc lift(T v, int64_t k) { return {static_cast<C>(v), k}; }
  LOCKSTEP_HOST_DEVICE static Acc next(Acc a, T v, int64_t k) {
    const C x = static_cast<C>(v);
    if (fn::is_nan(x) || (!fn::is_nan(a.value) && (kMax ? x >= a.value : x <= a.value))) return {x, k};
    return a;
  }
  LOCKSTEP_HOST_DEVICE static T finish(Acc a) { return static_cast<T>(a.value); }
  LOCKSTEP_HOST_DEVICE static int64_t index(Acc a) { return a.index; }
};

template <typename T>
struct Cummax : RunningExtreme<T, true> {};
template <typename T>
struct Cummin : RunningExtreme<T, false> {};

}  // namespace rule

// The rule of row S for element type T.
template <Scan S, typename T>
struct ScanRuleOf;
#define LOCKSTEP_SCAN_RULE(Name, str, kinds) \
  template <typename T>                      \
  struct ScanRuleOf<Scan::Name, T> {         \
    using type = rule::Name<T>;              \
  };
LOCKSTEP_SCANS(LOCKSTEP_SCAN_RULE)
#undef LOCKSTEP_SCAN_RULE
template <Scan S, typename T>
using ScanRule = typename ScanRuleOf<S, T>::type;

inline const char* scan_name(Scan op) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case Scan::Name: return str;
    LOCKSTEP_SCANS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  return "scan";
}

// f(std::integral_constant<Scan, S>, std::integral_constant<OpDtypes, dtypes>): the runtime row as
// compile-time constants, so a backend instantiates its loop once per row.
template <typename F>
decltype(auto) visit_scan(Scan op, F&& f) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case Scan::Name:                      \
    return f(std::integral_constant<Scan, Scan::Name>{}, std::integral_constant<OpDtypes, kinds>{});
    LOCKSTEP_SCANS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  fail("scan: unknown scan ", int(op));
}

// What the ops layer reads off a row: its dtypes and whether it writes int64 positions too.
struct ScanInfo {
  OpDtypes dtypes;
  bool index;
};
inline ScanInfo scan_info(Scan op) {
  return visit_scan(op, [](auto s, auto kinds) {
    return ScanInfo{decltype(kinds)::value, ScanRule<decltype(s)::value, double>::kIndex};
  });
}

}  // namespace lockstep
