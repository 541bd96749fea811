// The reductions, in one table read by the ops layer (names, dtype rules, the empty case), the CPU
// loops (tensor/cpu/reduce.cpp) and the CUDA kernels (tensor/cuda/reduce.cu) alike, as
// elementwise_ops.h is for elementwise ops. Each row is (Name, "name", dtypes) and names a rule
// rule::Name<T> below, defined once for host and device. A new reduction is one row, one rule, its
// autograd rule (autograd/reduce.cpp) and tests; no backend changes.
//
// A rule says how to reduce n elements of T: Acc (the accumulator), identity(), lift(v, k) (element v
// at position k enters), combine(a, b) (commutative and associative: threads and blocks finish in any
// order) and finish(acc, n) (the output, of type Out). Loops that see the elements in order (the CPU's)
// start from lift(x[0], 0) and fold each later element in with next(acc, v, k), which is
// combine(acc, lift(v, k)) without the checks that the order makes unnecessary.
//
// The accumulation rule, the same on both devices and in every layout (inner == 1 and inner > 1):
// floating sums, means and products accumulate in double and round once at the end; integer ones in
// int64 (the ops layer gives sums and products of bool and the narrower integers int64 results, as
// PyTorch's). bfloat16 and float16 are read at 16 bits on both
// devices: sums, means and products accumulate in double and round once; max, min and the arg rows
// compare in float32, where every 16-bit value is exact. The NaN rule: max and min propagate NaN;
// argmax and argmin give the first NaN, else the first extreme (PyTorch's rule).
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/check.h"
#include "tensor/elementwise_ops.h"
#include "tensor/host_device.h"

namespace lockstep {

// X(Name, "name", dtypes). bool and the integers narrower than int64 reach Sum and Prod as int64 (the ops
// layer converts).
#define LOCKSTEP_REDUCTIONS(X)          \
  X(Sum, "sum", OpDtypes::kNumeric)     \
  X(Mean, "mean", OpDtypes::kFloating)  \
  X(Prod, "prod", OpDtypes::kNumeric)   \
  X(Max, "max", OpDtypes::kAll)         \
  X(Min, "min", OpDtypes::kAll)         \
  X(Argmax, "argmax", OpDtypes::kAll)   \
  X(Argmin, "argmin", OpDtypes::kAll)

// Named Reduction, not ReduceOp: lockstep::dist::ReduceOp is the all-reduce's op (c10d's name).
#define LOCKSTEP_REDUCTION_ENUM(Name, str, kinds) Name,
enum class Reduction : uint8_t { LOCKSTEP_REDUCTIONS(LOCKSTEP_REDUCTION_ENUM) };
#undef LOCKSTEP_REDUCTION_ENUM

namespace rule {

// Floating inputs (bfloat16 and float16 included) accumulate in double, integers in int64.
template <typename T>
using WideAcc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;

}  // namespace rule

// Which operator a rule's combine is, when it is plain arithmetic on a number: the CPU then applies the
// same operator to whole vector registers of Acc (tensor/cpu/reduce.cpp), reassociated as combine allows.
enum class Combine : uint8_t { kAdd, kMul, kOther };

namespace rule {

template <typename T>
struct Sum {
  using Acc = WideAcc<T>;
  using Out = T;
  static constexpr Combine kCombine = Combine::kAdd;
  static constexpr bool kIndex = false, kEmptyOk = true;
  LOCKSTEP_HOST_DEVICE static Acc identity() { return Acc(0); }
  LOCKSTEP_HOST_DEVICE static Acc lift(T v, int64_t) { return Acc(v); }
  LOCKSTEP_HOST_DEVICE static Acc combine(Acc a, Acc b) { return a + b; }
  LOCKSTEP_HOST_DEVICE static Acc next(Acc a, T v, int64_t k) { return combine(a, lift(v, k)); }
  LOCKSTEP_HOST_DEVICE static Out finish(Acc a, int64_t) { return static_cast<Out>(a); }
};

template <typename T>
struct Mean : Sum<T> {
  using typename Sum<T>::Acc;
  // n == 0 gives 0/0 = NaN, PyTorch's empty mean.
  LOCKSTEP_HOST_DEVICE static T finish(Acc a, int64_t n) { return static_cast<T>(a / static_cast<Acc>(n)); }
};

template <typename T>
struct Prod {
  using Acc = WideAcc<T>;
  using Out = T;
  static constexpr Combine kCombine = Combine::kMul;
  static constexpr bool kIndex = false, kEmptyOk = true;
  LOCKSTEP_HOST_DEVICE static Acc identity() { return Acc(1); }
  LOCKSTEP_HOST_DEVICE static Acc lift(T v, int64_t) { return Acc(v); }
  LOCKSTEP_HOST_DEVICE static Acc combine(Acc a, Acc b) {
    // Integer products wrap (two's complement) instead of overflowing signed arithmetic.
    if constexpr (std::is_integral_v<Acc>) return static_cast<Acc>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    else return a * b;
  }
  LOCKSTEP_HOST_DEVICE static Acc next(Acc a, T v, int64_t k) { return combine(a, lift(v, k)); }
  LOCKSTEP_HOST_DEVICE static Out finish(Acc a, int64_t) { return static_cast<Out>(a); }
};

// A candidate extreme and its position along n; index -1: no element yet (so no identity value is
// needed for any dtype). Trivial, so it can live in CUDA shared memory.
template <typename T>
struct ArgAcc {
  T value;
  int64_t index;
};

// argmax/argmin: a NaN beats any number and the first NaN wins, else the larger (smaller) value, else
// the earlier position.
// Values are compared in compute_t<T> (a 16-bit value as the float32 it is exactly).
template <typename T, bool kMax, bool kArg>
struct Extreme {
  using C = compute_t<T>;
  using Acc = ArgAcc<C>;
  using Out = std::conditional_t<kArg, int64_t, T>;
  static constexpr Combine kCombine = Combine::kOther;
  static constexpr bool kIndex = kArg, kEmptyOk = false;
  // Whether v, seen after best, replaces it: the NaN rule in one place.
  LOCKSTEP_HOST_DEVICE static bool beats(C v, C best) {
    if (fn::is_nan(best)) return false;
    if (fn::is_nan(v)) return true;
    return kMax ? best < v : v < best;
  }
  LOCKSTEP_HOST_DEVICE static Acc identity() { return {C(0), -1}; }
  LOCKSTEP_HOST_DEVICE static Acc lift(T v, int64_t k) { return {static_cast<C>(v), k}; }
  // a and b in any order (blocks finish in any order): the earlier one is the incumbent.
  LOCKSTEP_HOST_DEVICE static Acc combine(Acc a, Acc b) {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    if (b.index < a.index) {
      const Acc t = a;
      a = b;
      b = t;
    }
    return beats(b.value, a.value) ? b : a;
  }
  LOCKSTEP_HOST_DEVICE static Acc next(Acc a, T v, int64_t k) {
    return beats(static_cast<C>(v), a.value) ? lift(v, k) : a;
  }
  LOCKSTEP_HOST_DEVICE static Out finish(Acc a, int64_t) {
    if constexpr (kArg) return a.index;
    else return static_cast<T>(a.value);
  }
};

// max and min need no position: the accumulator is the value itself (in compute_t<T>: exact for a
// 16-bit one), from the dtype's lowest (highest), and combine is torch.maximum's (torch.minimum's)
// NaN-propagating rule, which the order cannot change. Cheaper than Extreme's (value, index) pair, and
// it vectorizes.
template <typename T, bool kMax>
struct Bound {
  using Acc = compute_t<T>;
  using Out = T;
  static constexpr Combine kCombine = Combine::kOther;
  static constexpr bool kIndex = false, kEmptyOk = false;
  LOCKSTEP_HOST_DEVICE static Acc identity() {
    if constexpr (std::is_floating_point_v<Acc>) return kMax ? Acc(-INFINITY) : Acc(INFINITY);
    else if constexpr (std::is_same_v<T, bool>) return !kMax;
    else if constexpr (std::is_unsigned_v<T>) return kMax ? T(0) : T(~T(0));
    else return kMax ? T(T(1) << (8 * sizeof(T) - 1)) : T(~(T(1) << (8 * sizeof(T) - 1)));
  }
  LOCKSTEP_HOST_DEVICE static Acc lift(T v, int64_t) { return static_cast<Acc>(v); }
  LOCKSTEP_HOST_DEVICE static Acc combine(Acc a, Acc b) { return kMax ? fn::max_nan(a, b) : fn::min_nan(a, b); }
  LOCKSTEP_HOST_DEVICE static Acc next(Acc a, T v, int64_t) { return combine(a, static_cast<Acc>(v)); }
  LOCKSTEP_HOST_DEVICE static Out finish(Acc a, int64_t) { return static_cast<Out>(a); }
};

template <typename T>
struct Max : Bound<T, true> {};
template <typename T>
struct Min : Bound<T, false> {};
template <typename T>
struct Argmax : Extreme<T, true, true> {};
template <typename T>
struct Argmin : Extreme<T, false, true> {};

}  // namespace rule

// The rule of row R for element type T.
template <Reduction R, typename T>
struct ReduceRuleOf;
#define LOCKSTEP_REDUCTION_RULE(Name, str, kinds) \
  template <typename T>                           \
  struct ReduceRuleOf<Reduction::Name, T> {       \
    using type = rule::Name<T>;                   \
  };
LOCKSTEP_REDUCTIONS(LOCKSTEP_REDUCTION_RULE)
#undef LOCKSTEP_REDUCTION_RULE
template <Reduction R, typename T>
using ReduceRule = typename ReduceRuleOf<R, T>::type;

inline const char* reduction_name(Reduction op) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case Reduction::Name: return str;
    LOCKSTEP_REDUCTIONS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  return "reduce";
}

// f(std::integral_constant<Reduction, R>, std::integral_constant<OpDtypes, dtypes>): the runtime row
// as compile-time constants, so a backend instantiates its loop once per row.
template <typename F>
decltype(auto) visit_reduction(Reduction op, F&& f) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case Reduction::Name:                 \
    return f(std::integral_constant<Reduction, Reduction::Name>{}, std::integral_constant<OpDtypes, kinds>{});
    LOCKSTEP_REDUCTIONS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  fail("reduce: unknown reduction ", int(op));
}

// What the ops layer reads off a row: its dtypes, whether it writes int64 positions, and its value
// over an empty dimension (the rule's finish(identity(), 0): 0 for sum, NaN for mean, 1 for prod),
// where it has one.
struct ReductionInfo {
  OpDtypes dtypes;
  bool index, empty_ok;
  double empty_value;
};
inline ReductionInfo reduction_info(Reduction op) {
  return visit_reduction(op, [](auto r, auto kinds) {
    using R = ReduceRule<decltype(r)::value, double>;
    double empty = 0;
    if constexpr (R::kEmptyOk) empty = static_cast<double>(R::finish(R::identity(), 0));
    return ReductionInfo{decltype(kinds)::value, R::kIndex, R::kEmptyOk, empty};
  });
}

}  // namespace lockstep
