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
#include "tensor/cpu/pack.h"
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
