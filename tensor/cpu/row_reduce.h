// Sums and maxima along a row, for the per-ISA kernel files (tensor/cpu/isa.h): the accumulators are
// four vector registers of independent partial results (16 floats each with AVX-512, 8 with AVX2),
// folded in halves at the end. One running sum is a chain of dependent adds (4
// cycles each), and a running max does not vectorize at all without -ffast-math; LayerNorm's row
// sums were 7% of a GPT step, softmax's max and sum half of the op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <immintrin.h>

#include "tensor/cpu/isa.h"
#include "tensor/dtype.h"

LOCKSTEP_ISA_BEGIN

#if defined(LOCKSTEP_ISA_AVX512)
constexpr int kVectorBytes = 64;
#else
constexpr int kVectorBytes = 32;
#endif

// One register of T.
template <typename T>
struct Vec {
  typedef T type __attribute__((vector_size(kVectorBytes)));
};

// op(lower half of v, upper half of v), down to one lane.
template <typename V, typename Op, size_t... I>
auto fold_halves(V v, Op op, std::index_sequence<I...>) {
  return op(__builtin_shufflevector(v, v, I...), __builtin_shufflevector(v, v, (I + sizeof...(I))...));
}
template <typename V, typename Op>
auto fold(V v, Op op) {
  constexpr size_t n = sizeof(V) / sizeof(v[0]);
  if constexpr (n == 2) return op(v[0], v[1]);
  else return fold(fold_halves(v, op, std::make_index_sequence<n / 2>()), op);
}

// kLanes float32 values from kLanes bfloat16 or float16 ones at p (unaligned): bfloat16 is the upper half
// of a float32, so a widening shift; float16 through F16C's vcvtph2ps (x86-64-v3 has it).
template <int kLanes> struct HalfVec {
  typedef float F __attribute__((vector_size(kLanes * 4)));
  typedef uint16_t Raw __attribute__((vector_size(kLanes * 2)));
  typedef uint32_t Wide __attribute__((vector_size(kLanes * 4)));
};
template <int kLanes, typename T>
typename HalfVec<kLanes>::F load_floats(const T* p) {
  using F = typename HalfVec<kLanes>::F;
  if constexpr (std::is_same_v<T, BFloat16>) {
    // Intrinsics, not __builtin_convertvector on 16-bit vectors, which GCC 12 splits into 128-bit
    // halves (eleven instructions per 8 lanes instead of two: sum over a middle dimension ran at half
    // float32's speed).
#if defined(LOCKSTEP_ISA_AVX512)
    if constexpr (kLanes == 16)  // maskz: the unmasked forms trip GCC 12's -Wmaybe-uninitialized
      return (F)_mm512_maskz_slli_epi32(
          0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
    else
#endif
    if constexpr (kLanes == 8)
      return (F)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
    else return (F)_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), 16);
  } else {
    static_assert(std::is_same_v<T, Float16>);
#if defined(LOCKSTEP_ISA_AVX512)
    if constexpr (kLanes == 16)  // maskz: the unmasked form trips GCC 12's -Wmaybe-uninitialized
      return (F)_mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    else
#endif
    if constexpr (kLanes == 8) return (F)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    else return (F)_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
}

// kLanes elements of Acc from p[0 .. kLanes) (unaligned), converted from T.
template <typename Acc, typename T>
typename Vec<Acc>::type load_as(const T* p) {
  constexpr int kLanes = kVectorBytes / sizeof(Acc);
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
    const auto f = load_floats<kLanes>(p);
    if constexpr (std::is_same_v<Acc, double>) {  // one vcvtps2pd (the generic conversion is split in two)
#if defined(LOCKSTEP_ISA_AVX512)
      return (typename Vec<Acc>::type)_mm512_maskz_cvtps_pd(0xff, (__m256)f);  // maskz: as load_floats
#else
      return (typename Vec<Acc>::type)_mm256_cvtps_pd((__m128)f);
#endif
    } else {
      return __builtin_convertvector(f, typename Vec<Acc>::type);
    }
  } else {
    typedef T Raw __attribute__((vector_size(kLanes * sizeof(T))));
    Raw raw;
    std::memcpy(&raw, p, sizeof raw);
    return __builtin_convertvector(raw, typename Vec<Acc>::type);
  }
}

// op over f(p[k]...) for k < n, the elements converted to Acc first, from `init` (op's identity).
// f is called with vectors of Acc and with single Acc values (a generic lambda: arithmetic with
// scalars of type Acc works on both); integers go one at a time.
template <typename Acc, typename Op, typename F, typename... T>
Acc row_reduce(int64_t n, Op op, Acc init, F&& f, const T*... p) {
  int64_t k = 0;
  Acc r = init;
  if constexpr (std::is_floating_point_v<Acc>) {
    using V = typename Vec<Acc>::type;
    constexpr int kLanes = kVectorBytes / sizeof(Acc);
    // Four accumulators: one would be a chain of dependent adds (4 cycles each) over a long row.
    V acc[4] = {V{} + init, V{} + init, V{} + init, V{} + init};
    for (; k + 4 * kLanes <= n; k += 4 * kLanes)
      for (int u = 0; u < 4; ++u) acc[u] = op(acc[u], f(load_as<Acc>(p + k + u * kLanes)...));
    for (; k + kLanes <= n; k += kLanes) acc[0] = op(acc[0], f(load_as<Acc>(p + k)...));
    r = fold(op(op(acc[0], acc[1]), op(acc[2], acc[3])), op);
  }
  for (; k < n; ++k) r = op(r, f(static_cast<Acc>(p[k])...));
  return r;
}

// The sum of f(p[k]...) over k < n, in Acc.
template <typename Acc, typename F, typename... T>
Acc row_sum(int64_t n, F&& f, const T*... p) {
  return row_reduce<Acc>(n, [](auto a, auto b) { return a + b; }, Acc(0), f, p...);
}

// The largest of p[0 .. n), in Acc (-inf when n == 0). A NaN may or may not win; softmax, the caller,
// turns a NaN input into NaN outputs through exp(x - max) anyway.
template <typename Acc, typename T>
Acc row_max(int64_t n, const T* p) {
  return row_reduce<Acc>(n, [](auto a, auto b) { return a > b ? a : b; }, Acc(-__builtin_inf()),
                         [](auto v) { return v; }, p);
}

// f(x) = x, for row_sum.
inline constexpr auto kIdentity = [](auto v) { return v; };

LOCKSTEP_ISA_END
