// GEMM's checks, its split over the intra-op threads, and the runtime choice of kernel: AVX-512 or
// AVX2 for float32 and float64, AMX, AVX512-BF16 or the float32 fallback for bfloat16 (tensor/cpu/isa.h).
#include "tensor/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/check.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/blocked_gemm.h"
#include "tensor/cpu/gemm_bf16.h"
#include "tensor/cpu/small_gemm.h"
#include "tensor/dtype.h"
#include "tensor/parallel.h"

namespace lockstep::cpu {

#define LOCKSTEP_GEMM_DECL(ns)                                                                                \
  namespace ns {                                                                                              \
  void gemm_f32(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,   \
                float, float*, int64_t);                                                                      \
  void gemm_f64(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*, int64_t, \
                double, double*, int64_t);                                                                    \
  }
LOCKSTEP_GEMM_DECL(avx2)
LOCKSTEP_GEMM_DECL(avx512)
#undef LOCKSTEP_GEMM_DECL

namespace {

// A one-thread product: op(A), op(B) of TA, C of TC, alpha and beta of S.
template <typename TA, typename TC = TA, typename S = TC>
using Kernel = void (*)(bool, bool, int64_t, int64_t, int64_t, S, const TA*, int64_t, const TA*, int64_t, S, TC*,
                        int64_t);

// float32 products of the shapes a transformer's layers make (C at most a few hundred columns wide,
// of at least a tile's height) go to blocked_gemm: on AVX-512 6-25% faster than Eigen's there, with
// AVX2 within 3% (gemm_bench --shapes gpt). Eigen keeps the rest: a convolution's im2col products (C tens of thousands of
// columns wide, where blocked_gemm's column strips of C conflict in the caches: 1.5-2.5x slower) and
// very narrow ones (most of a blocked_gemm tile would be padding).
Kernel<float> kernel_for(float*, int64_t m, int64_t n) {
  if (n >= 32 && n <= 2048 && m >= 16) return use_avx512() ? avx512::blocked_gemm : avx2::blocked_gemm;
  return use_avx512() ? avx512::gemm_f32 : avx2::gemm_f32;
}
Kernel<double> kernel_for(double*, int64_t, int64_t) { return use_avx512() ? avx512::gemm_f64 : avx2::gemm_f64; }
// Whether the AMX kernel, where the processor has it, agrees with the AVX512-BF16 kernel on a product
// with edges in every dimension (both transposes, odd depth, partial tiles), checked once: the AMX kernel
// is the one no machine of this project's CI has, so a fault in it falls back rather than computing
// wrong products. Both accumulate in float32, in different orders: they agree to ~1e-6 relative.
bool amx_checked() {
  static const bool ok = [] {
    if (!use_amx_bf16()) return false;
    constexpr int64_t m = 45, n = 37, k = 83;
    std::vector<BFloat16> a(m * k), b(k * n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = BFloat16(float(int(i * 7919 % 61) - 30) / 16.f);
    for (size_t i = 0; i < b.size(); ++i) b[i] = BFloat16(float(int(i * 104729 % 53) - 26) / 16.f);
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        std::vector<float> want(m * n), got(m * n);
        avx512_bf16::gemm_bf16(ta, tb, m, n, k, 1.f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.f, want.data(), n);
        amx_bf16::gemm_bf16(ta, tb, m, n, k, 1.f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.f, got.data(), n);
        for (int64_t i = 0; i < m * n; ++i)
          if (!(std::fabs(got[i] - want[i]) <= 1e-4f * (1.f + std::fabs(want[i])))) {
            std::fprintf(stderr, "lockstep: the AMX bfloat16 GEMM gave %g where the AVX512-BF16 kernel gives %g "
                         "(element %lld of its check product); using AVX512-BF16\n", double(got[i]), double(want[i]),
                         static_cast<long long>(i));
            return false;
          }
      }
    return true;
  }();
  return ok;
}

// bfloat16 operands, one row per instruction set (tensor/cpu/gemm_bf16.h).
template <typename TC>
Kernel<BFloat16, TC, float> kernel_for_bf16() {
  if (amx_checked()) return amx_bf16::gemm_bf16;
  return use_avx512_bf16() ? Kernel<BFloat16, TC, float>(avx512_bf16::gemm_bf16)
                           : Kernel<BFloat16, TC, float>(bf16_fallback::gemm_bf16);
}

// Products with fewer multiply-adds than this per thread stay on one thread. 2^21 multiply-adds
// take ~45 us on one AVX-512 core (gemm_bench: ~95 GFLOP/s for the MLP's large products), several
// times what waking a sleeping worker costs; the MLP's 655K-multiply-add products (~25-35 us each)
// stay on the caller. Not tuned further: the 2-core machine was saturated by other builds.
constexpr int64_t kMinWorkPerThread = int64_t(1) << 21;

// Products with at most this many multiply-adds go to small_gemm (no packing) where it applies:
// attention's per-head products (64 x 64 x 32) are 2^17.
constexpr int64_t kSmallGemmWork = int64_t(1) << 18;
// And products of at most this many rows of C whose op(B) is read in place, up to one thread's work: a
// recurrent step's h W_hh^T ([20, 128] x [128, 512]) and its backward, where blocked_gemm packed all of
// B at every step for only m rows (gemm_bench --shapes rnn on an idle core: 32.6 -> 23.6 us and
// 31.1 -> 22.8 us, 1.4x).
constexpr int64_t kSmallGemmRows = 32;

template <typename TA, typename TC, typename S>
void gemm_checked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, S alpha, const TA* a, int64_t lda, const TA* b,
                  int64_t ldb, S beta, TC* c, int64_t ldc) {
  LOCKSTEP_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: negative size m=", m, " n=", n, " k=", k);
  LOCKSTEP_CHECK(lda >= std::max<int64_t>(1, ta ? m : k), "gemm: lda=", lda, " is below the row length ",
                 ta ? m : k, " of A (", ta ? "[k, m]" : "[m, k]", ", m=", m, " k=", k, ")");
  LOCKSTEP_CHECK(ldb >= std::max<int64_t>(1, tb ? k : n), "gemm: ldb=", ldb, " is below the row length ",
                 tb ? k : n, " of B (", tb ? "[n, k]" : "[k, n]", ", k=", k, " n=", n, ")");
  LOCKSTEP_CHECK(ldc >= std::max<int64_t>(1, n), "gemm: ldc=", ldc, " is below the row length n=", n, " of C");
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == S(0)) {  // C = beta * C; the kernel wants k > 0
    for (int64_t i = 0; i < m; ++i) {
      TC* row = c + i * ldc;
      if (beta == S(0)) std::fill(row, row + n, TC(S(0)));
      else if (beta != S(1)) std::transform(row, row + n, row, [&](TC v) { return TC(beta * S(v)); });
    }
    return;
  }
  const int64_t work = m * n * k;
  Kernel<TA, TC, S> kernel;
  if constexpr (std::is_same_v<TA, BFloat16>) {
    kernel = kernel_for_bf16<TC>();
  } else {
    if ((work <= kSmallGemmWork || (m <= kSmallGemmRows && !tb && work <= kMinWorkPerThread)) &&
        LOCKSTEP_CPU_ISA_CALL(small_gemm<TA>, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
      return;
    kernel = kernel_for(static_cast<TA*>(nullptr), m, n);
  }
  // Split C into blocks of whole rows when op(A) has at least as many rows as op(B) has columns,
  // else into blocks of columns, so each thread runs one ordinary (smaller) product on the longer
  // side. Row blocks (multiples of 8 rows) share B and read their own rows of A; column blocks
  // (multiples of 16 columns, a whole number of AVX-512 vectors) share A. Each thread packs the
  // shared operand itself: for the MLP's shapes that duplicates 1/64 or less of the work.
  const bool by_rows = m >= n;
  const int64_t unit = by_rows ? 8 : 16;
  const int64_t units = ((by_rows ? m : n) + unit - 1) / unit;
  const int64_t work_per_unit = unit * (by_rows ? n : m) * k;
  const int64_t grain = (kMinWorkPerThread + work_per_unit - 1) / work_per_unit;
  parallel_for(0, units, grain, [&](int64_t u0, int64_t u1) {
    int64_t i0 = u0 * unit, i1 = std::min(u1 * unit, by_rows ? m : n);
    if (by_rows) kernel(ta, tb, i1 - i0, n, k, alpha, ta ? a + i0 : a + i0 * lda, lda, b, ldb, beta, c + i0 * ldc, ldc);
    else kernel(ta, tb, m, i1 - i0, k, alpha, a, lda, tb ? b + i0 * ldb : b + i0, ldb, beta, c + i0, ldc);
  });
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_checked(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_checked(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_checked(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  gemm_checked(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace lockstep::cpu
