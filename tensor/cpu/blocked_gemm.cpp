// Blocked GEMM for float32 (tensor/cpu/blocked_gemm.h). For each block of kKC rows of op(B) (the
// depth): op(B)'s rows are packed into micro-panels of kNR columns ([kc][kNR], zero-padded past n);
// then for each micro-panel, for each group of kMR rows of C, a kMR x kNR tile of C is held in
// registers while the micro-panel streams from L1 and A's elements are broadcast from where they
// are (rows of A in place, or columns when A is given transposed: no packing of A). The first depth
// block applies beta, the later ones add to C.
// Every header is included before LOCKSTEP_ISA_BEGIN (tensor/cpu/isa.h says why).
#include "tensor/cpu/blocked_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/pack.h"
#include "tensor/cpu/row_reduce.h"

LOCKSTEP_ISA_BEGIN
namespace {

using VF = V<float>;
constexpr int kLanes = sizeof(VF) / sizeof(float);
// The tile: kMR rows x kNV vectors of accumulators, plus kNV vectors of B and one broadcast.
#if defined(LOCKSTEP_ISA_AVX512)
constexpr int kMR = 6, kNV = 4;  // 24 of the 32 registers (7 x 4 spills one; 14 x 2, 12 x 2, 8 x 3 ran slower)
#else
constexpr int kMR = 6, kNV = 2;  // 12 of the 16 registers
#endif
constexpr int kNR = kNV * kLanes;
// A micro-panel of B (kKC x kNR floats) fits in L1 with room for A's rows.
constexpr int64_t kKC = 128;  // 32 KiB of L1's 48 (96, 192 and 256 ran slower)

// packed[jp][p][kNR] = op(B)[p0 + p, jp * kNR + j], zero where the column is past n.
void pack_b(bool tb, const float* b, int64_t ldb, int64_t n, int64_t p0, int64_t kc, float* packed) {
  if (!tb) {
    // Row by row of B, so that B (often an activation last touched long ago, as in a weight
    // gradient's x) streams from memory in order; the panels' rows land in L2. Whole panel rows
    // are fixed-size copies (vector moves, not a library call each).
    const int64_t full = n / kNR * kNR;
    for (int64_t p = 0; p < kc; ++p) {
      const float* row = b + (p0 + p) * ldb;
      float* dst = packed + p * kNR;
      for (int64_t j0 = 0; j0 < full; j0 += kNR, dst += kc * kNR) std::memcpy(dst, row + j0, kNR * sizeof(float));
      if (full < n) {
        std::memcpy(dst, row + full, (n - full) * sizeof(float));
        std::fill(dst + (n - full), dst + kNR, 0.f);
      }
    }
    return;
  }
  for (int64_t j0 = 0; j0 < n; j0 += kNR, packed += kc * kNR) {
    const int64_t cols = std::min<int64_t>(kNR, n - j0);
    // B is stored [n, k]: 8 x 8 transposes where whole, one element at a time at the edges.
    const int64_t full_cols = cols / 8 * 8, full_p = kc / 8 * 8;
    for (int64_t p = 0; p < full_p; p += 8)
      for (int64_t j = 0; j < full_cols; j += 8) transpose8x8(b + (j0 + j) * ldb + p0 + p, ldb, packed + p * kNR + j, kNR);
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t j = p < full_p ? full_cols : 0; j < cols; ++j) packed[p * kNR + j] = b[(j0 + j) * ldb + p0 + p];
      std::fill(packed + p * kNR + cols, packed + (p + 1) * kNR, 0.f);
    }
  }
}

// C[0..R, 0..cols) = alpha * A[0..R, 0..kc) @ panel + beta * C (run() passes beta for the first depth
// block, 1 for the later ones; beta == 0 never reads C). `a` is A's element
// (i0, p0); rows of A step by lda, or, transposed, its columns do.
template <bool kTransA, int R>
void tile(int64_t kc, const float* a, int64_t lda, const float* panel, float alpha, float beta, float* c,
          int64_t ldc, int64_t cols) {
  VF acc[R][kNV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kNV; ++v) acc[r][v] = VF{};
  for (int64_t p = 0; p < kc; ++p) {
    VF bv[kNV];
    for (int v = 0; v < kNV; ++v) bv[v] = load(panel + p * kNR + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const float av = kTransA ? a[p * lda + r] : a[r * lda + p];
      for (int v = 0; v < kNV; ++v) acc[r][v] += av * bv[v];
    }
  }
  if (cols == kNR) {
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kNV; ++v) {
        float* dst = c + r * ldc + v * kLanes;
        // beta == 0 never reads C (a NaN there stays out), as gemm() promises.
        const VF out = beta == 0.f ? alpha * acc[r][v] : alpha * acc[r][v] + beta * load(dst);
        std::memcpy(dst, &out, sizeof out);
      }
    return;
  }
  for (int r = 0; r < R; ++r) {  // the last columns of C: through a row on the stack
    float row[kNR];
    for (int v = 0; v < kNV; ++v) {
      const VF out = alpha * acc[r][v];
      std::memcpy(row + v * kLanes, &out, sizeof out);
    }
    float* dst = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) dst[j] = beta == 0.f ? row[j] : row[j] + beta * dst[j];
  }
}

template <bool kTransA, int R>
void tile_rows(int64_t rows, int64_t kc, const float* a, int64_t lda, const float* panel, float alpha, float beta,
               float* c, int64_t ldc, int64_t cols) {
  if constexpr (R > 0) {
    if (rows == R) tile<kTransA, R>(kc, a, lda, panel, alpha, beta, c, ldc, cols);
    else tile_rows<kTransA, R - 1>(rows, kc, a, lda, panel, alpha, beta, c, ldc, cols);
  }
}

template <bool kTransA>
void run(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, bool tb, const float* b,
         int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local std::vector<float> packed;
  const int64_t panels = (n + kNR - 1) / kNR;
  packed.resize(std::min(k, kKC) * panels * kNR);
  for (int64_t p0 = 0; p0 < k; p0 += kKC) {
    const int64_t kc = std::min(kKC, k - p0);
    pack_b(tb, b, ldb, n, p0, kc, packed.data());
    const float tile_beta = p0 == 0 ? beta : 1.f;
    for (int64_t jp = 0; jp < panels; ++jp) {
      const float* panel = packed.data() + jp * kc * kNR;
      const int64_t j0 = jp * kNR, cols = std::min<int64_t>(kNR, n - j0);
      for (int64_t i0 = 0; i0 < m; i0 += kMR) {
        const float* a0 = kTransA ? a + p0 * lda + i0 : a + i0 * lda + p0;
        float* c0 = c + i0 * ldc + j0;
        if (i0 + kMR <= m) tile<kTransA, kMR>(kc, a0, lda, panel, alpha, tile_beta, c0, ldc, cols);
        else tile_rows<kTransA, kMR - 1>(m - i0, kc, a0, lda, panel, alpha, tile_beta, c0, ldc, cols);
      }
    }
  }
}

}  // namespace

void blocked_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (ta) run<true>(m, n, k, alpha, a, lda, tb, b, ldb, beta, c, ldc);
  else run<false>(m, n, k, alpha, a, lda, tb, b, ldb, beta, c, ldc);
}

LOCKSTEP_ISA_END
