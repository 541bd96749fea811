// The elementwise ops, in one table read by the ops layer (names, dtype rules, output dtypes), the CPU
// backend and the CUDA kernels alike. Each row is (Name, "name", dtypes) and names a functor
// fn::Name below, defined once for host and device. A new elementwise op is one row, one functor, its
// autograd rule (autograd/elementwise.cpp) and tests; no backend changes.
//
// The output's C++ type is whatever the functor returns for the input type (bool for comparisons),
// so the row needs no separate output rule.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "tensor/dtype.h"
#include "tensor/host_device.h"
#include "tensor/int_div.h"

namespace lockstep {

// Which dtypes a row accepts, read off the dtype's compute type (tensor/dtype.h): bfloat16 and float16
// are floating.
enum class OpDtypes : uint8_t { kAll, kNumeric, kFloating };

template <OpDtypes K, typename T>
constexpr bool op_accepts() {
  if constexpr (K == OpDtypes::kFloating) return std::is_floating_point_v<compute_t<T>>;
  else if constexpr (K == OpDtypes::kNumeric) return !std::is_same_v<T, bool>;
  else return true;
}

// X(Name, "name", dtypes)
#define LOCKSTEP_UNARY_OPS(X)               \
  X(Neg, "neg", OpDtypes::kNumeric)         \
  X(Abs, "abs", OpDtypes::kNumeric)         \
  X(Sign, "sign", OpDtypes::kNumeric)       \
  X(Relu, "relu", OpDtypes::kNumeric)       \
  X(LogicalNot, "logical_not", OpDtypes::kAll) \
  X(Exp, "exp", OpDtypes::kFloating)        \
  X(Log, "log", OpDtypes::kFloating)        \
  X(Sqrt, "sqrt", OpDtypes::kFloating)      \
  X(Rsqrt, "rsqrt", OpDtypes::kFloating)    \
  X(Sin, "sin", OpDtypes::kFloating)        \
  X(Cos, "cos", OpDtypes::kFloating)        \
  X(Tanh, "tanh", OpDtypes::kFloating)      \
  X(Sigmoid, "sigmoid", OpDtypes::kFloating) \
  X(Silu, "silu", OpDtypes::kFloating)      \
  X(Gelu, "gelu", OpDtypes::kFloating)      \
  X(GeluTanh, "gelu_tanh", OpDtypes::kFloating)

// Rows named *Backward take (upstream gradient, saved forward value) and return the input gradient.
#define LOCKSTEP_BINARY_OPS(X)                                  \
  X(Add, "add", OpDtypes::kNumeric)                             \
  X(Sub, "sub", OpDtypes::kNumeric)                             \
  X(Mul, "mul", OpDtypes::kNumeric)                             \
  X(Div, "div", OpDtypes::kNumeric)                             \
  X(Maximum, "maximum", OpDtypes::kNumeric)                     \
  X(Minimum, "minimum", OpDtypes::kNumeric)                     \
  X(Pow, "pow", OpDtypes::kFloating)                            \
  X(Eq, "eq", OpDtypes::kAll)                                   \
  X(Ne, "ne", OpDtypes::kAll)                                   \
  X(Lt, "lt", OpDtypes::kAll)                                   \
  X(Le, "le", OpDtypes::kAll)                                   \
  X(Gt, "gt", OpDtypes::kAll)                                   \
  X(Ge, "ge", OpDtypes::kAll)                                   \
  X(LogicalAnd, "logical_and", OpDtypes::kAll)                  \
  X(LogicalOr, "logical_or", OpDtypes::kAll)                    \
  X(ReluBackward, "relu_backward", OpDtypes::kNumeric)          \
  X(SigmoidBackward, "sigmoid_backward", OpDtypes::kFloating)   \
  X(TanhBackward, "tanh_backward", OpDtypes::kFloating)         \
  X(SiluBackward, "silu_backward", OpDtypes::kFloating)         \
  X(GeluBackward, "gelu_backward", OpDtypes::kFloating)         \
  X(GeluTanhBackward, "gelu_tanh_backward", OpDtypes::kFloating)

#define LOCKSTEP_OP_ENUM(Name, str, kinds) Name,
enum class UnaryOp : uint8_t { LOCKSTEP_UNARY_OPS(LOCKSTEP_OP_ENUM) };
enum class BinaryOp : uint8_t { LOCKSTEP_BINARY_OPS(LOCKSTEP_OP_ENUM) };
#undef LOCKSTEP_OP_ENUM

// float and double overloads of the C math functions, callable from host and device code.
namespace math {
#define LOCKSTEP_MATH_FN(name)                                                 \
  LOCKSTEP_HOST_DEVICE inline float name(float x) { return ::name##f(x); } \
  LOCKSTEP_HOST_DEVICE inline double name(double x) { return ::name(x); }
LOCKSTEP_MATH_FN(log)
LOCKSTEP_MATH_FN(sqrt)
LOCKSTEP_MATH_FN(sin)
LOCKSTEP_MATH_FN(cos)
LOCKSTEP_MATH_FN(tanh)
#undef LOCKSTEP_MATH_FN
// exp in float32: on the host Cephes' expf (round x / ln2 to n, a degree-5 polynomial for e^r on
// [-ln2/2, ln2/2], then 2^n from bits in two halves, so denormal results round as expf's do), with no
// branch or call, so loops over it vectorize: gelu's backward called expf once per element, 15% of a
// GPT step. Within 2 ulp of expf (tests/tensor/tensor_test.cpp); on the device CUDA's expf.
LOCKSTEP_HOST_DEVICE inline float exp(float x) {
#ifdef __CUDA_ARCH__
  return ::expf(x);
#else
  // Below -104 the result rounds to 0, above 89 to inf; NaN passes both comparisons unchanged.
  const float c = x < -104.f ? -104.f : (x > 89.f ? 89.f : x);
  const float kRound = 12582912.f;  // 1.5 * 2^23: adding it leaves round(v) in the low mantissa bits
  const float t = c * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;  // c - n ln2, ln2 split in two
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  // n in [-150, 129]: 2^n as 2^(n/2) * 2^(n - n/2), each a normal float.
  const int32_t k = static_cast<int32_t>(__builtin_bit_cast(uint32_t, t) - __builtin_bit_cast(uint32_t, kRound));
  const int32_t k1 = k / 2, k2 = k - k1;
  return p * __builtin_bit_cast(float, static_cast<uint32_t>(k1 + 127) << 23) *
         __builtin_bit_cast(float, static_cast<uint32_t>(k2 + 127) << 23);
#endif
}
LOCKSTEP_HOST_DEVICE inline double exp(double x) { return ::exp(x); }
// erf in float32: on the host a rational approximation (the one Eigen and XLA use, a few ulp from
// erff over the whole range) that has no branch or call, so loops over it vectorize (erff does not:
// gelu was 10x slower than PyTorch's with it); on the device CUDA's erff, which is fast there.
LOCKSTEP_HOST_DEVICE inline float erf(float x) {
#ifdef __CUDA_ARCH__
  return ::erff(x);
#else
  x = x < -4.f ? -4.f : (x > 4.f ? 4.f : x);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return x * p / q;
#endif
}
LOCKSTEP_HOST_DEVICE inline double erf(double x) { return ::erf(x); }
LOCKSTEP_HOST_DEVICE inline float pow(float x, float y) { return ::powf(x, y); }
LOCKSTEP_HOST_DEVICE inline double pow(double x, double y) { return ::pow(x, y); }
}  // namespace math

namespace fn {

#define LOCKSTEP_UNARY(Name, expr)                                   \
  struct Name {                                                      \
    template <typename T>                                            \
    LOCKSTEP_HOST_DEVICE auto operator()(T x) const { return expr; } \
  };
#define LOCKSTEP_BINARY(Name, expr)                                       \
  struct Name {                                                           \
    template <typename T>                                                 \
    LOCKSTEP_HOST_DEVICE auto operator()(T x, T y) const { return expr; } \
  };

// Numeric helpers, written once for the functors below.
template <typename T>
LOCKSTEP_HOST_DEVICE T sigmoid(T x) {  // never overflows: exp of a non-positive argument only
  if (x >= T(0)) return T(1) / (T(1) + math::exp(-x));
  T e = math::exp(x);
  return e / (T(1) + e);
}
template <typename T>
LOCKSTEP_HOST_DEVICE bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x;
  else return false;
}
// torch.maximum / torch.minimum propagate NaN from either operand.
template <typename T>
LOCKSTEP_HOST_DEVICE T max_nan(T x, T y) { return is_nan(y) ? y : (x < y ? y : x); }
template <typename T>
LOCKSTEP_HOST_DEVICE T min_nan(T x, T y) { return is_nan(y) ? y : (y < x ? y : x); }

constexpr double kSqrt1_2 = 0.70710678118654752440;  // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

// gelu's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); also its derivative.
template <typename T>
LOCKSTEP_HOST_DEVICE T gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + math::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x)));
}
template <typename T>
LOCKSTEP_HOST_DEVICE T gelu_tanh_grad(T x) {
  T t = math::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
}

// x < 0, stated without comparing an unsigned x with zero (which compilers warn about).
template <typename T>
LOCKSTEP_HOST_DEVICE constexpr bool negative(T x) {
  if constexpr (std::is_unsigned_v<T>) return false;
  else return x < T(0);
}

LOCKSTEP_UNARY(Neg, static_cast<T>(-x))
LOCKSTEP_UNARY(Abs, static_cast<T>(negative(x) ? -x : x))
LOCKSTEP_UNARY(Sign, static_cast<T>((T(0) < x) - negative(x)))
LOCKSTEP_UNARY(Relu, negative(x) ? T(0) : x)  // NaN stays NaN
LOCKSTEP_UNARY(LogicalNot, !static_cast<bool>(x))
LOCKSTEP_UNARY(Exp, math::exp(x))
LOCKSTEP_UNARY(Log, math::log(x))
LOCKSTEP_UNARY(Sqrt, math::sqrt(x))
LOCKSTEP_UNARY(Rsqrt, T(1) / math::sqrt(x))
LOCKSTEP_UNARY(Sin, math::sin(x))
LOCKSTEP_UNARY(Cos, math::cos(x))
LOCKSTEP_UNARY(Tanh, math::tanh(x))
LOCKSTEP_UNARY(Sigmoid, sigmoid(x))
LOCKSTEP_UNARY(Silu, x * sigmoid(x))
LOCKSTEP_UNARY(Gelu, T(0.5) * x * (T(1) + math::erf(x * T(kSqrt1_2))))
LOCKSTEP_UNARY(GeluTanh, gelu_tanh(x))

LOCKSTEP_BINARY(Add, static_cast<T>(x + y))
LOCKSTEP_BINARY(Sub, static_cast<T>(x - y))
LOCKSTEP_BINARY(Mul, static_cast<T>(x * y))
LOCKSTEP_BINARY(Maximum, max_nan(x, y))
LOCKSTEP_BINARY(Minimum, min_nan(x, y))
LOCKSTEP_BINARY(Pow, math::pow(x, y))
LOCKSTEP_BINARY(Eq, x == y)
LOCKSTEP_BINARY(Ne, x != y)
LOCKSTEP_BINARY(Lt, x < y)
LOCKSTEP_BINARY(Le, x <= y)
LOCKSTEP_BINARY(Gt, x > y)
LOCKSTEP_BINARY(Ge, x >= y)
LOCKSTEP_BINARY(LogicalAnd, static_cast<bool>(x) && static_cast<bool>(y))
LOCKSTEP_BINARY(LogicalOr, static_cast<bool>(x) || static_cast<bool>(y))
// (g, output of relu): the output is positive exactly where the input is.
LOCKSTEP_BINARY(ReluBackward, y > T(0) ? x : T(0))
LOCKSTEP_BINARY(SigmoidBackward, x * y * (T(1) - y))  // (g, output)
LOCKSTEP_BINARY(TanhBackward, x * (T(1) - y * y))      // (g, output)
LOCKSTEP_BINARY(SiluBackward, x * sigmoid(y) * (T(1) + y * (T(1) - sigmoid(y))))  // (g, input)
LOCKSTEP_BINARY(GeluBackward, x * (T(0.5) * (T(1) + math::erf(y * T(kSqrt1_2))) +
                                   y * T(kInvSqrt2Pi) * math::exp(T(-0.5) * y * y)))  // (g, input)
LOCKSTEP_BINARY(GeluTanhBackward, x * gelu_tanh_grad(y))  // (g, input)

// Integer division truncates (tensor/int_div.h); a zero int64 divisor is refused before the kernel.
struct Div {
  template <typename T>
  LOCKSTEP_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return detail::int_div(x, y);
    else return static_cast<T>(x / y);
  }
};

#undef LOCKSTEP_UNARY
#undef LOCKSTEP_BINARY
}  // namespace fn

// f on operands of storage types X..., each converted to compute_t<T> first, the result rounded once
// to T (a bool result stays bool): how both backends run a row on bfloat16 and float16 storage, and on a
// 16-bit operand beside a float32 one (T = float). For every other T it is f itself. A struct, not a
// lambda, so that CUDA kernels take it as they take the functors.
template <typename F, typename T>
struct InComputeType {
  F f;
  template <typename... X>
  LOCKSTEP_HOST_DEVICE auto operator()(X... x) const {
    using C = compute_t<T>;
    if constexpr (std::is_same_v<decltype(f(static_cast<C>(x)...)), bool>) return f(static_cast<C>(x)...);
    else return static_cast<T>(f(static_cast<C>(x)...));
  }
};
template <typename T, typename F>
LOCKSTEP_HOST_DEVICE InComputeType<F, T> in_compute_type(F f) {
  return {f};
}

// The row's name at run time (for the ops layer's checks and error messages).
inline const char* op_name(UnaryOp op) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case UnaryOp::Name: return str;
    LOCKSTEP_UNARY_OPS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  return "unary";
}
inline const char* op_name(BinaryOp op) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case BinaryOp::Name: return str;
    LOCKSTEP_BINARY_OPS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  return "binary";
}

// Calls f(fn::Name{}, std::integral_constant<OpDtypes, kinds>{}) for the row of `op`: how both backends
// turn a runtime op into a compile-time functor.
template <typename F>
decltype(auto) visit_op(UnaryOp op, F&& f) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case UnaryOp::Name: return f(fn::Name{}, std::integral_constant<OpDtypes, kinds>{});
    LOCKSTEP_UNARY_OPS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  fail("unary: unknown op ", int(op));
}
template <typename F>
decltype(auto) visit_op(BinaryOp op, F&& f) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case BinaryOp::Name: return f(fn::Name{}, std::integral_constant<OpDtypes, kinds>{});
    LOCKSTEP_BINARY_OPS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  fail("binary: unknown op ", int(op));
}

// The row's dtype rule, and whether it returns bool (comparisons and logical ops) rather than its
// input dtype: read off the functor, so the table states each once.
template <typename Op>
OpDtypes op_dtypes(Op op) {
  return visit_op(op, [](auto, auto kinds) { return decltype(kinds)::value; });
}
template <typename Op>
bool op_returns_bool(Op op) {
  return visit_op(op, [](auto f, auto) {
    if constexpr (std::is_same_v<Op, UnaryOp>) return std::is_same_v<decltype(f(1.0f)), bool>;
    else return std::is_same_v<decltype(f(1.0f, 1.0f)), bool>;
  });
}

}  // namespace lockstep
