// Copies that lay operands out for the GEMM kernels (small_gemm.cpp, blocked_gemm.cpp): an
// unaligned vector load, and op(B) given transposed copied to [k, n] through 8 x 8 register
// transposes instead of one scalar move per element. Per ISA, as row_reduce.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"

LOCKSTEP_ISA_BEGIN

template <typename T>
using V = typename Vec<T>::type;

template <typename T>
inline V<T> load(const T* p) {
  V<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The transpose of the 8 x 8 floats at src (row stride ls) into dst (row stride ld), in registers:
// three rounds of shuffles (pairs of rows, pairs of pairs, halves) instead of 64 scalar moves.
inline void transpose8x8(const float* src, int64_t ls, float* dst, int64_t ld) {
  typedef float F8 __attribute__((vector_size(32)));
  F8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&r[i], src + i * ls, sizeof(F8));
  for (int i = 0; i < 8; i += 2) {  // per 128-bit half: r_i[0] r_i+1[0] r_i[1] r_i+1[1], and [2], [3]
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {  // columns c and c + 4 of four rows, for c = 0..3
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int c = 0; c < 4; ++c) {  // rows 0-3 and 4-7 of columns c and c + 4
    const F8 lo = __builtin_shufflevector(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const F8 hi = __builtin_shufflevector(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + c * ld, &lo, sizeof(F8));
    std::memcpy(dst + (c + 4) * ld, &hi, sizeof(F8));
  }
}

// packed [k, n] = the transpose of b [n, k] (row stride ldb).
template <typename T>
inline void pack_transposed(const T* b, int64_t ldb, int64_t n, int64_t k, T* packed) {
  int64_t p0 = 0;
  if constexpr (std::is_same_v<T, float>) {  // n is a whole number of vectors, so of 8
    for (; p0 + 8 <= k; p0 += 8)
      for (int64_t j = 0; j < n; j += 8) transpose8x8(b + j * ldb + p0, ldb, packed + p0 * n + j, n);
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = p0; p < k; ++p) packed[p * n + j] = b[j * ldb + p];
}

LOCKSTEP_ISA_END
