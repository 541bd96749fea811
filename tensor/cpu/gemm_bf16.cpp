// The bfloat16 GEMM's fallback for processors without AVX512-BF16 (tensor/cpu/gemm_bf16.h): each
// block of kKC depths of op(A) and op(B) is converted to float32 (exact: a bfloat16 is the upper half
// of a float32) and multiplied by the float32 GEMM, whose float32 accumulation is the same rule the
// AVX512-BF16 kernel follows. bfloat16 C accumulates in a float32 copy and is rounded once.
#include <algorithm>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_bf16.h"
#include "tensor/dtype.h"

namespace lockstep::cpu::bf16_fallback {

namespace {

// Depths converted at a time: the float32 blocks stay a fraction of the operands.
constexpr int64_t kKC = 256;

template <typename TC>
void run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
         const BFloat16* b, int64_t ldb, float beta, TC* c, int64_t ldc) {
  thread_local std::vector<float> fa, fb, fc;
  constexpr bool kBf16Out = std::is_same_v<TC, BFloat16>;
  float* cf = nullptr;
  int64_t ldcf = ldc;
  if constexpr (kBf16Out) {
    fc.resize(size_t(m * n));
    cf = fc.data();
    ldcf = n;
  } else {
    cf = c;
  }
  for (int64_t p0 = 0; p0 < k; p0 += kKC) {
    const int64_t kc = std::min(kKC, k - p0);
    fa.resize(size_t(m * kc));  // op(A)[:, p0:p0+kc] as [m, kc]
    fb.resize(size_t(kc * n));  // op(B)[p0:p0+kc, :] as [kc, n]
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < kc; ++p) fa[i * kc + p] = ta ? a[(p0 + p) * lda + i] : a[i * lda + p0 + p];
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t j = 0; j < n; ++j) fb[p * n + j] = tb ? b[j * ldb + p0 + p] : b[(p0 + p) * ldb + j];
    const bool first = p0 == 0;
    cpu::gemm(false, false, m, n, kc, kBf16Out ? 1.f : alpha, fa.data(), kc, fb.data(), n,
              first ? (kBf16Out ? 0.f : beta) : 1.f, cf, ldcf);
  }
  if constexpr (kBf16Out) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        // beta == 0 never reads C (a NaN there stays out), as gemm() promises.
        const float ab = alpha * cf[i * n + j];
        c[i * ldc + j] = BFloat16(beta == 0.f ? ab : ab + beta * float(c[i * ldc + j]));
      }
  }
}

}  // namespace

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  run(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  run(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace lockstep::cpu::bf16_fallback
