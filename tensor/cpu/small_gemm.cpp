// Small GEMM (tensor/cpu/small_gemm.h). A block of kRows rows of C, kVecs vectors wide, is held in
// registers; for each p < k it takes one row of op(B) (kVecs loads) and adds A[i, p] times it to
// each of its rows: kRows * kVecs multiply-adds per kVecs loads and kRows broadcasts, near the
// multiply-add ports' peak while op(B) stays in L1. op(B) given transposed is copied to [k, n] first.
// Every header is included before LOCKSTEP_ISA_BEGIN (tensor/cpu/isa.h says why).
#include "tensor/cpu/small_gemm.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"

LOCKSTEP_ISA_BEGIN
namespace {

// op(B) up to this many elements is copied when given transposed (64 KiB of float).
constexpr int64_t kMaxPackedB = 16384;
#if defined(LOCKSTEP_ISA_AVX512)
constexpr int kRows = 4;  // 4 x 4 accumulators of 32 registers
#else
constexpr int kRows = 2;  // 2 x 4 accumulators of 16 registers
#endif

template <typename T>
using V = typename Vec<T>::type;

template <typename T>
V<T> load(const T* p) {
  V<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The transpose of the 8 x 8 floats at src (row stride ls) into dst (row stride ld), in registers:
// three rounds of shuffles (pairs of rows, pairs of pairs, halves) instead of 64 scalar moves.
void transpose8x8(const float* src, int64_t ls, float* dst, int64_t ld) {
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
void pack_transposed(const T* b, int64_t ldb, int64_t n, int64_t k, T* packed) {
  int64_t p0 = 0;
  if constexpr (std::is_same_v<T, float>) {  // n is a whole number of vectors, so of 8
    for (; p0 + 8 <= k; p0 += 8)
      for (int64_t j = 0; j < n; j += 8) transpose8x8(b + j * ldb + p0, ldb, packed + p0 * n + j, n);
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = p0; p < k; ++p) packed[p * n + j] = b[j * ldb + p];
}

// Rows [i0, i0 + R) and vectors [j0, j0 + NV * lanes) of C.
template <bool kTransA, int R, int NV, typename T>
void block(int64_t i0, int64_t j0, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb,
           T beta, T* c, int64_t ldc) {
  constexpr int kLanes = sizeof(V<T>) / sizeof(T);
  V<T> acc[R][NV];  // set lane by lane: "= {}" became a memset of the stack copy, 6% of the kernel
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V<T>{};
  for (int64_t p = 0; p < k; ++p) {
    V<T> bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load(b + p * ldb + j0 + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const T av = kTransA ? a[p * lda + i0 + r] : a[(i0 + r) * lda + p];
      for (int v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      T* dst = c + (i0 + r) * ldc + j0 + v * kLanes;
      // beta == 0 never reads C (a NaN there stays out), as gemm() promises.
      const V<T> out = beta == T(0) ? alpha * acc[r][v] : alpha * acc[r][v] + beta * load(dst);
      std::memcpy(dst, &out, sizeof out);
    }
}

// All rows for vectors [j0, j0 + NV * lanes).
template <bool kTransA, int NV, typename T>
void column_block(int64_t m, int64_t j0, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                  int64_t ldb, T beta, T* c, int64_t ldc) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows) block<kTransA, kRows, NV>(i, j0, k, alpha, a, lda, b, ldb, beta, c, ldc);
  for (; i < m; ++i) block<kTransA, 1, NV>(i, j0, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <typename T>
bool small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                int64_t ldb, T beta, T* c, int64_t ldc) {
  constexpr int kLanes = sizeof(V<T>) / sizeof(T);
  if (n % kLanes != 0 || (tb && k * n > kMaxPackedB)) return false;
  if (tb) {  // B is stored [n, k]: copy it to [k, n]
    thread_local std::vector<T> packed;
    packed.resize(k * n);
    pack_transposed(b, ldb, n, k, packed.data());
    b = packed.data();
    ldb = n;
  }
  auto run = [&](auto trans_a) {
    constexpr bool kTransA = decltype(trans_a)::value;
    int64_t j = 0;
    for (; j + 4 * kLanes <= n; j += 4 * kLanes) column_block<kTransA, 4>(m, j, k, alpha, a, lda, b, ldb, beta, c, ldc);
    switch ((n - j) / kLanes) {
      case 3: column_block<kTransA, 3>(m, j, k, alpha, a, lda, b, ldb, beta, c, ldc); break;
      case 2: column_block<kTransA, 2>(m, j, k, alpha, a, lda, b, ldb, beta, c, ldc); break;
      case 1: column_block<kTransA, 1>(m, j, k, alpha, a, lda, b, ldb, beta, c, ldc); break;
      default: break;
    }
  };
  if (ta) run(std::true_type{});
  else run(std::false_type{});
  return true;
}

template bool small_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                int64_t, float, float*, int64_t);
template bool small_gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                 const double*, int64_t, double, double*, int64_t);

LOCKSTEP_ISA_END
