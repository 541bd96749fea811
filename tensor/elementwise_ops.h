// The elementwise ops, in one table read by the ops layer (names, dtype rules, output dtypes), the CPU
// backend and the CUDA kernels alike. Each row is (Name, "name", dtypes) and names a functor
// fn::Name below, defined once for host and device. A new elementwise op is one row, one functor, its
// autograd rule (autograd/elementwise.cpp) and tests; no backend changes.
//
// A row with parameters (elu's alpha, softplus's beta and threshold, hardtanh's bounds) reads them from
// its functor's OpScalars `s`, which the call carries to the kernels on either device: the parameters
// are the row's, not extra operands, so leaky_relu is one pass and not a where over two products.
//
// The output's C++ type is whatever the functor returns for the input type (bool for comparisons),
// so the row needs no separate output rule.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>
#include <utility>

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
  X(GeluTanh, "gelu_tanh", OpDtypes::kFloating) \
  X(Elu, "elu", OpDtypes::kFloating)              /* s: alpha, scale, input_scale */ \
  X(Softplus, "softplus", OpDtypes::kFloating)    /* s: beta, threshold */ \
  X(Hardtanh, "hardtanh", OpDtypes::kFloating)    /* s: min_val, max_val */ \
  X(Hardshrink, "hardshrink", OpDtypes::kFloating) /* s: lambd */ \
  X(Softshrink, "softshrink", OpDtypes::kFloating) /* s: lambd */ \
  X(Threshold, "threshold", OpDtypes::kNumeric)   /* s: threshold, value */ \
  X(LeakyRelu, "leaky_relu", OpDtypes::kFloating) /* s: negative_slope */ \
  X(Hardsigmoid, "hardsigmoid", OpDtypes::kFloating) \
  X(Hardswish, "hardswish", OpDtypes::kFloating)  \
  X(Mish, "mish", OpDtypes::kFloating)            \
  X(LogSigmoid, "log_sigmoid", OpDtypes::kFloating) \
  X(Softsign, "softsign", OpDtypes::kFloating)    \
  X(Tanhshrink, "tanhshrink", OpDtypes::kFloating) \
  X(Floor, "floor", OpDtypes::kNumeric)           \
  X(Ceil, "ceil", OpDtypes::kNumeric)             \
  X(Round, "round", OpDtypes::kNumeric)           \
  X(Trunc, "trunc", OpDtypes::kNumeric)           \
  X(Frac, "frac", OpDtypes::kFloating)            \
  X(Reciprocal, "reciprocal", OpDtypes::kFloating) \
  X(Log1p, "log1p", OpDtypes::kFloating)          \
  X(Expm1, "expm1", OpDtypes::kFloating)          \
  X(Log2, "log2", OpDtypes::kFloating)            \
  X(Log10, "log10", OpDtypes::kFloating)          \
  X(Erf, "erf", OpDtypes::kFloating)              \
  X(Erfc, "erfc", OpDtypes::kFloating)            \
  X(Erfinv, "erfinv", OpDtypes::kFloating)        \
  X(Tan, "tan", OpDtypes::kFloating)              \
  X(Asin, "asin", OpDtypes::kFloating)            \
  X(Acos, "acos", OpDtypes::kFloating)            \
  X(Atan, "atan", OpDtypes::kFloating)            \
  X(Sinh, "sinh", OpDtypes::kFloating)            \
  X(Cosh, "cosh", OpDtypes::kFloating)            \
  X(IsNan, "isnan", OpDtypes::kAll)               \
  X(IsInf, "isinf", OpDtypes::kAll)               \
  X(IsFinite, "isfinite", OpDtypes::kAll)

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
  X(GeluTanhBackward, "gelu_tanh_backward", OpDtypes::kFloating) \
  X(Atan2, "atan2", OpDtypes::kFloating)                        \
  X(Fmod, "fmod", OpDtypes::kNumeric)                           \
  X(Remainder, "remainder", OpDtypes::kNumeric)                 \
  X(EluBackward, "elu_backward", OpDtypes::kFloating)           \
  X(SoftplusBackward, "softplus_backward", OpDtypes::kFloating) \
  X(HardtanhBackward, "hardtanh_backward", OpDtypes::kFloating) \
  X(ShrinkBackward, "shrink_backward", OpDtypes::kFloating)     \
  X(ThresholdBackward, "threshold_backward", OpDtypes::kNumeric) \
  X(LeakyReluBackward, "leaky_relu_backward", OpDtypes::kFloating) \
  X(HardsigmoidBackward, "hardsigmoid_backward", OpDtypes::kFloating) \
  X(HardswishBackward, "hardswish_backward", OpDtypes::kFloating) \
  X(MishBackward, "mish_backward", OpDtypes::kFloating)         \
  X(LogSigmoidBackward, "log_sigmoid_backward", OpDtypes::kFloating) \
  X(SoftsignBackward, "softsign_backward", OpDtypes::kFloating)

// A row's parameters (see the top of this file); a row without any ignores them.
struct OpScalars {
  double a = 0, b = 0, c = 0;
};

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
LOCKSTEP_MATH_FN(log1p)
LOCKSTEP_MATH_FN(expm1)
LOCKSTEP_MATH_FN(log2)
LOCKSTEP_MATH_FN(log10)
LOCKSTEP_MATH_FN(erfc)
LOCKSTEP_MATH_FN(tan)
LOCKSTEP_MATH_FN(asin)
LOCKSTEP_MATH_FN(acos)
LOCKSTEP_MATH_FN(atan)
LOCKSTEP_MATH_FN(sinh)
LOCKSTEP_MATH_FN(cosh)
LOCKSTEP_MATH_FN(floor)
LOCKSTEP_MATH_FN(ceil)
LOCKSTEP_MATH_FN(trunc)
LOCKSTEP_MATH_FN(rint)  // round half to even, as torch.round
#undef LOCKSTEP_MATH_FN
#define LOCKSTEP_MATH_FN2(name)                                                                     \
  LOCKSTEP_HOST_DEVICE inline float name(float x, float y) { return ::name##f(x, y); } \
  LOCKSTEP_HOST_DEVICE inline double name(double x, double y) { return ::name(x, y); }
LOCKSTEP_MATH_FN2(atan2)
LOCKSTEP_MATH_FN2(fmod)
#undef LOCKSTEP_MATH_FN2
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
// erfinv: CUDA has it; on the host M. Giles' approximation ("Approximating the erfinv function", GPU
// Computing Gems, 2011; float accuracy) polished by two Newton steps on erf in double, which brings it to
// double accuracy. Not vectorized: no model runs it in a hot loop.
LOCKSTEP_HOST_DEVICE inline double erfinv(double y) {
#ifdef __CUDA_ARCH__
  return ::erfinv(y);
#else
  if (!(y > -1.0 && y < 1.0)) return y == 1.0 ? HUGE_VAL : (y == -1.0 ? -HUGE_VAL : NAN);
  double w = -::log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = ::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * y;
  for (int i = 0; i < 2; ++i) x -= (::erf(x) - y) / (1.1283791670955126 * ::exp(-x * x));  // 2/sqrt(pi)
  return x;
#endif
}
LOCKSTEP_HOST_DEVICE inline float erfinv(float y) {
#ifdef __CUDA_ARCH__
  return ::erfinvf(y);
#else
  return static_cast<float>(erfinv(static_cast<double>(y)));
#endif
}
LOCKSTEP_HOST_DEVICE inline float pow(float x, float y) { return ::powf(x, y); }
LOCKSTEP_HOST_DEVICE inline double pow(double x, double y) { return ::pow(x, y); }
}  // namespace math

namespace fn {

// Every functor carries the call's OpScalars `s`; `expr` reads them as T(s.a) and so on.
#define LOCKSTEP_UNARY(Name, expr)                                   \
  struct Name {                                                      \
    OpScalars s;                                                     \
    template <typename T>                                            \
    LOCKSTEP_HOST_DEVICE auto operator()(T x) const { return expr; } \
  };
#define LOCKSTEP_BINARY(Name, expr)                                       \
  struct Name {                                                           \
    OpScalars s;                                                          \
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
template <typename T>
LOCKSTEP_HOST_DEVICE bool is_inf(T x) {
  if constexpr (std::is_floating_point_v<T>) return x == T(INFINITY) || x == T(-INFINITY);
  else return false;
}
// floor, ceil, round and trunc leave integers as they are.
#define LOCKSTEP_ROUNDING(name)                             \
  template <typename T>                                     \
  LOCKSTEP_HOST_DEVICE T name##_of(T x) {                   \
    if constexpr (std::is_integral_v<T>) return x;          \
    else return math::name(x);                              \
  }
LOCKSTEP_ROUNDING(floor)
LOCKSTEP_ROUNDING(ceil)
LOCKSTEP_ROUNDING(rint)
LOCKSTEP_ROUNDING(trunc)
#undef LOCKSTEP_ROUNDING
template <typename T>
LOCKSTEP_HOST_DEVICE constexpr bool int_minus_one(T y) {
  if constexpr (std::is_signed_v<T>) return y == T(-1);
  else return false;
}
// softplus(x) = log(1 + e^x), never overflowing: x + log1p(e^-x) for positive x.
template <typename T>
LOCKSTEP_HOST_DEVICE T softplus(T x) {
  return x > T(0) ? x + math::log1p(math::exp(-x)) : math::log1p(math::exp(x));
}
// d/dx x tanh(softplus(x)) = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2).
template <typename T>
LOCKSTEP_HOST_DEVICE T mish_grad(T x) {
  const T t = math::tanh(softplus(x));
  return t + x * sigmoid(x) * (T(1) - t * t);
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
// elu(x) = scale * (x > 0 ? x : alpha * (exp(input_scale * x) - 1)): selu and celu are its parameters.
LOCKSTEP_UNARY(Elu, x > T(0) ? T(s.b) * x : T(s.b) * T(s.a) * math::expm1(x * T(s.c)))
// Linear where beta * x > threshold, as PyTorch (and exp cannot overflow there).
LOCKSTEP_UNARY(Softplus, x * T(s.a) > T(s.b) ? x : math::log1p(math::exp(x * T(s.a))) / T(s.a))
LOCKSTEP_UNARY(Hardtanh, x < T(s.a) ? T(s.a) : (x > T(s.b) ? T(s.b) : x))  // NaN stays NaN
LOCKSTEP_UNARY(Hardshrink, x >= -T(s.a) && x <= T(s.a) ? T(0) : x)
LOCKSTEP_UNARY(Softshrink, x > T(s.a) ? x - T(s.a) : (x < -T(s.a) ? x + T(s.a) : T(0)))
LOCKSTEP_UNARY(Threshold, x <= static_cast<T>(s.a) ? static_cast<T>(s.b) : x)
LOCKSTEP_UNARY(LeakyRelu, x > T(0) ? x : x * T(s.a))
LOCKSTEP_UNARY(Hardsigmoid, x <= T(-3) ? T(0) : (x >= T(3) ? T(1) : x / T(6) + T(0.5)))
LOCKSTEP_UNARY(Hardswish, x <= T(-3) ? T(0) : (x >= T(3) ? x : x * (x + T(3)) / T(6)))
LOCKSTEP_UNARY(Mish, x * math::tanh(softplus(x)))
LOCKSTEP_UNARY(LogSigmoid, (x < T(0) ? x : T(0)) - math::log1p(math::exp(-(x < T(0) ? -x : x))))
LOCKSTEP_UNARY(Softsign, x / (T(1) + (x < T(0) ? -x : x)))
LOCKSTEP_UNARY(Tanhshrink, x - math::tanh(x))
LOCKSTEP_UNARY(Floor, floor_of(x))
LOCKSTEP_UNARY(Ceil, ceil_of(x))
LOCKSTEP_UNARY(Round, rint_of(x))
LOCKSTEP_UNARY(Trunc, trunc_of(x))
LOCKSTEP_UNARY(Frac, x - math::trunc(x))
LOCKSTEP_UNARY(Reciprocal, T(1) / x)
LOCKSTEP_UNARY(Log1p, math::log1p(x))
LOCKSTEP_UNARY(Expm1, math::expm1(x))
LOCKSTEP_UNARY(Log2, math::log2(x))
LOCKSTEP_UNARY(Log10, math::log10(x))
LOCKSTEP_UNARY(Erf, math::erf(x))
LOCKSTEP_UNARY(Erfc, math::erfc(x))
LOCKSTEP_UNARY(Erfinv, math::erfinv(x))
LOCKSTEP_UNARY(Tan, math::tan(x))
LOCKSTEP_UNARY(Asin, math::asin(x))
LOCKSTEP_UNARY(Acos, math::acos(x))
LOCKSTEP_UNARY(Atan, math::atan(x))
LOCKSTEP_UNARY(Sinh, math::sinh(x))
LOCKSTEP_UNARY(Cosh, math::cosh(x))
LOCKSTEP_UNARY(IsNan, is_nan(x))
LOCKSTEP_UNARY(IsInf, is_inf(x))
LOCKSTEP_UNARY(IsFinite, !is_nan(x) && !is_inf(x))

// Signed integers wrap on overflow, as PyTorch's do: computed on unsigned 64-bit words, where wrapping
// is defined (int32's x + y would be undefined behaviour in C++), and truncated to T. The low bits are
// the same, so the compiler still uses T-wide instructions.
template <typename T>
inline constexpr bool kWraps = std::is_integral_v<T> && std::is_signed_v<T>;
#define LOCKSTEP_WRAPPING(expr_wrap, expr) \
  kWraps<T> ? static_cast<T>(expr_wrap) : static_cast<T>(expr)
LOCKSTEP_BINARY(Add, LOCKSTEP_WRAPPING(static_cast<uint64_t>(x) + static_cast<uint64_t>(y), x + y))
LOCKSTEP_BINARY(Sub, LOCKSTEP_WRAPPING(static_cast<uint64_t>(x) - static_cast<uint64_t>(y), x - y))
LOCKSTEP_BINARY(Mul, LOCKSTEP_WRAPPING(static_cast<uint64_t>(x) * static_cast<uint64_t>(y), x * y))
#undef LOCKSTEP_WRAPPING
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
LOCKSTEP_BINARY(Atan2, math::atan2(x, y))
// The activations' backward rows: (g, input), with the forward's scalars.
LOCKSTEP_BINARY(EluBackward, y > T(0) ? x * T(s.b) : x * T(s.b) * T(s.a) * T(s.c) * math::exp(y * T(s.c)))
LOCKSTEP_BINARY(SoftplusBackward, y * T(s.a) > T(s.b) ? x : x * sigmoid(y * T(s.a)))
LOCKSTEP_BINARY(HardtanhBackward, y <= T(s.a) || y >= T(s.b) ? T(0) : x)
LOCKSTEP_BINARY(ShrinkBackward, y >= -T(s.a) && y <= T(s.a) ? T(0) : x)  // hardshrink and softshrink
LOCKSTEP_BINARY(ThresholdBackward, y <= static_cast<T>(s.a) ? T(0) : x)
LOCKSTEP_BINARY(LeakyReluBackward, y > T(0) ? x : x * T(s.a))
// PyTorch's multiplies by 1/6 rounded to float in every dtype; the same here, so float64 gradients agree.
LOCKSTEP_BINARY(HardsigmoidBackward, y > T(-3) && y < T(3) ? x * T(1.0f / 6.0f) : T(0))
LOCKSTEP_BINARY(HardswishBackward, y < T(-3) ? T(0) : (y <= T(3) ? x * (y / T(3) + T(0.5)) : x))
LOCKSTEP_BINARY(MishBackward, x * mish_grad(y))
LOCKSTEP_BINARY(LogSigmoidBackward, x * sigmoid(-y))
LOCKSTEP_BINARY(SoftsignBackward, x / ((T(1) + (y < T(0) ? -y : y)) * (T(1) + (y < T(0) ? -y : y))))

// Integer division truncates (tensor/int_div.h); a zero int64 divisor is refused before the kernel.
struct Div {
  OpScalars s;
  template <typename T>
  LOCKSTEP_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return detail::int_div(x, y);
    else return static_cast<T>(x / y);
  }
};

// C's fmod: the remainder has the dividend's sign. Integers as C++'s %, which x86 traps on for
// INT64_MIN % -1 (the answer is 0); a zero divisor is refused as div's.
struct Fmod {
  OpScalars s;
  template <typename T>
  LOCKSTEP_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) return y == T(0) || int_minus_one(y) ? T(0) : static_cast<T>(x % y);
    else return math::fmod(x, y);
  }
};
// Python's %: the remainder has the divisor's sign (torch.remainder).
struct Remainder {
  OpScalars s;
  template <typename T>
  LOCKSTEP_HOST_DEVICE T operator()(T x, T y) const {
    const T r = Fmod{}(x, y);
    return r != T(0) && negative(r) != negative(y) ? static_cast<T>(r + y) : r;
  }
};

// The rows whose integer form divides: a GPU checks their divisor on the device (tensor/cuda), the ops
// layer on the host where it can read it.
template <typename F>
constexpr bool kDividesIntegers = std::is_same_v<F, Div> || std::is_same_v<F, Fmod> || std::is_same_v<F, Remainder>;

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

// Calls f(fn::Name{s}, std::integral_constant<OpDtypes, kinds>{}) for the row of `op`: how both backends
// turn a runtime op into a compile-time functor holding the call's scalars.
template <typename F>
decltype(auto) visit_op(UnaryOp op, const OpScalars& s, F&& f) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case UnaryOp::Name: return f(fn::Name{s}, std::integral_constant<OpDtypes, kinds>{});
    LOCKSTEP_UNARY_OPS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  fail("unary: unknown op ", int(op));
}
template <typename F>
decltype(auto) visit_op(BinaryOp op, const OpScalars& s, F&& f) {
  switch (op) {
#define LOCKSTEP_CASE(Name, str, kinds) \
  case BinaryOp::Name: return f(fn::Name{s}, std::integral_constant<OpDtypes, kinds>{});
    LOCKSTEP_BINARY_OPS(LOCKSTEP_CASE)
#undef LOCKSTEP_CASE
  }
  fail("binary: unknown op ", int(op));
}
// The same for questions about the row itself (its dtypes, its result type).
template <typename Op, typename F>
decltype(auto) visit_op(Op op, F&& f) {
  return visit_op(op, OpScalars{}, std::forward<F>(f));
}

// The row's dtype rule, and whether it returns bool (comparisons and logical ops) rather than its
// input dtype: read off the functor, so the table states each once.
template <typename Op>
OpDtypes op_dtypes(Op op) {
  return visit_op(op, [](auto, auto kinds) { return decltype(kinds)::value; });
}
// Whether the row divides integers (div, fmod, remainder): a zero integer divisor is refused.
inline bool divides_integers(BinaryOp op) {
  return visit_op(op, [](auto f, auto) { return fn::kDividesIntegers<decltype(f)>; });
}
template <typename Op>
bool op_returns_bool(Op op) {
  return visit_op(op, [](auto f, auto) {
    if constexpr (std::is_same_v<Op, UnaryOp>) return std::is_same_v<decltype(f(1.0f)), bool>;
    else return std::is_same_v<decltype(f(1.0f, 1.0f)), bool>;
  });
}

}  // namespace lockstep
