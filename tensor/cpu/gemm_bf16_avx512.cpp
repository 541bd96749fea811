// bfloat16 GEMM with float32 accumulation on AVX512-BF16 (tensor/cpu/gemm_bf16.h), BLIS-style:
// for each block of kKC rows of op(B) (the depth) and kNC columns, op(B) is packed into micro-panels of
// kNR columns whose k-pairs are interleaved ([kc / 2][kNR][2]: VNNI order, what vdpbf16ps reads, one
// vector = 16 columns x one pair of depths); then, for each block of kMC rows, op(A) is packed into
// micro-panels of kMR rows ([kc / 2][kMR] pairs), and every kMR x kNR tile of C is accumulated in
// registers by micro_kernel_bf16.h's kernel: per pair of depths kNV vector loads of B, kMR 32-bit
// broadcasts of A and kMR * kNV vdpbf16ps (64 multiply-adds each). Packing A as well as B keeps both
// streams contiguous and pads the odd depth and the edges with zeros, so the micro-kernel has no edge
// cases but the store.
//
// float32 C takes the result directly (beta on the first depth block, then added to). bfloat16 C of
// a product deeper than kKC (2048) accumulates in a float32 scratch block and is rounded once at the end, so
// the result is rounded once, as PyTorch's. Rounding is round-to-nearest-even with denormals kept
// (BFloat16::round), not vcvtneps2bf16, which flushes them.
//
// Compiled for AVX-512 with BF16 by a target pragma (not -march), so nothing built here can be
// merged into code that runs on a processor without it; every header comes first (tensor/cpu/isa.h).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/cpu/gemm_bf16.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")

#include "tensor/cpu/micro_kernel_bf16.h"  // after the pragma: compiled for its target (pack_bf16.h says why)
#include "tensor/cpu/pack_bf16.h"

namespace lockstep::cpu::avx512_bf16 {
namespace {

// The tile: kMR rows x kNV vectors of 16 float32 accumulators (24 of the 32 registers), kNV registers
// of B and one broadcast of A (7 x 4 spilled two accumulators: 4% slower; 14 x 2 and 8 x 3 ran slower).
constexpr int kMR = 6, kNV = 4;
constexpr int kNR = kNV * 16;
static_assert(kNV == 4, "dpbf16_kernel_cols takes up to 4 vectors");
// The blocking, measured on the GPT's products (2048 x 384 x {384, 1152, 1536}, 2048 x 1536 x 384 and
// the weight gradients' k = 2048; one Zen 4 core): the whole depth in one block up to kKC = 2048 (768
// ran their k = 1152-2048 products 5-10% slower, 192 15%), B's micro-panel streaming from L2 and
// prefetched kPrefetch pairs ahead; rows of A in blocks of kMC, and all of a 1536-wide B in one block
// of columns (1024 ran n = 1152 and 1536 5% slower).
constexpr int64_t kKC = 2048;
constexpr int64_t kMC = kMR * 16;
constexpr int64_t kNC = kNR * 24;
constexpr int kPrefetch = 8;

// Where the micro-kernel reads op(A)'s pairs: pair (r, q) of a micro-panel is the 32-bit word at
// base + r * rs + q * qs (bfloat16 units) for the panel's base.
struct APanels {
  const uint16_t* a;  // the block's row 0, depth 0
  int64_t rs, qs;     // one row down, one pair deeper
  int64_t ps;         // one micro-panel (kMR rows) down
};

// op(A)'s block of mc rows from i0 and kc depths from p0, as the micro-kernel reads it:
// - A [m, k], kc even, whole micro-panels: in place (a row's pairs are adjacent);
// - A [k, m]: rows 2q and 2q + 1 interleaved into buf as [kp][width] pairs (width >= mc rounded up to
//   kMR, zeros past mc and k);
// - otherwise (an odd last depth, the last rows): copied into buf as [kp][width] pairs.
APanels pack_a(bool ta, const uint16_t* a, int64_t lda, int64_t k, int64_t i0, int64_t mc, int64_t p0,
               int64_t kc, std::vector<uint32_t>& buf) {
  const int64_t kp = (kc + 1) / 2;
  if (!ta && kc % 2 == 0 && mc % kMR == 0) return {a + i0 * lda + p0, lda, 2, kMR * lda};
  const int64_t width = ((mc + kMR - 1) / kMR * kMR + 31) / 32 * 32;
  buf.resize(size_t(kp * width));
  if (ta) interleave_row_pairs(a + p0 * lda + i0, lda, kc, mc, width, buf.data());
  else transpose_pairs(a + i0 * lda + p0, lda, mc, kc, width, buf.data());
  return {reinterpret_cast<const uint16_t*>(buf.data()), 2, 2 * width, 2 * kMR};
}

// One thread's product. TC is float (C float32) or uint16_t (C bfloat16).
template <typename TC>
void run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
         const uint16_t* b, int64_t ldb, float beta, TC* c, int64_t ldc) {
  thread_local std::vector<uint32_t> pb_buf, pa_buf;
  thread_local std::vector<float> scratch;
  constexpr bool kBf16Out = sizeof(TC) == 2;
  const bool use_scratch = kBf16Out && k > kKC;
  const int64_t nc_max = std::min(n, kNC);
  pb_buf.resize(size_t((std::min(k, kKC) + 1) / 2 * ((nc_max + kNR - 1) / kNR) * kNR));
  if (use_scratch) scratch.resize(size_t(m * nc_max));
  for (int64_t j0 = 0; j0 < n; j0 += kNC) {
    const int64_t nc = std::min(kNC, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKC) {
      const int64_t kc = std::min(kKC, k - p0), kp = (kc + 1) / 2;
      const bool first = p0 == 0, last = p0 + kc == k;
      pack_b(tb, tb ? b + j0 * ldb : b + j0, ldb, nc, k, p0, kc, kNR, kp, pb_buf.data());
      for (int64_t i0 = 0; i0 < m; i0 += kMC) {
        const int64_t mc = std::min(kMC, m - i0);
        const APanels ap = pack_a(ta, a, lda, k, i0, mc, p0, kc, pa_buf);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const uint32_t* panel = pb_buf.data() + jr / kNR * kp * kNR;
          const int64_t cols = std::min<int64_t>(kNR, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const uint16_t* pa = ap.a + ir / kMR * ap.ps;
            const int64_t rows = std::min<int64_t>(kMR, mc - ir);
            if (!use_scratch) {
              dpbf16_kernel_cols<kMR, kPrefetch>(kp, pa, ap.rs, ap.qs, panel, kNR, c + (i0 + ir) * ldc + j0 + jr,
                                                 ldc, rows, cols, alpha, first ? beta : 1.f);
            } else {
              float* s = scratch.data() + (i0 + ir) * nc + jr;
              dpbf16_kernel_cols<kMR, kPrefetch>(kp, pa, ap.rs, ap.qs, panel, kNR, s, nc, rows, cols, 1.f,
                                                 first ? 0.f : 1.f);
            }
          }
        }
      }
      if (use_scratch && last) {
        // C [m, nc] = round(alpha * scratch + beta * C).
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < nc; j += 16) {
            const int64_t left = std::min<int64_t>(16, nc - j);
            const __mmask16 mk = left == 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
            store(_mm512_maskz_loadu_ps(mk, scratch.data() + i * nc + j), c + i * ldc + j0 + j, mk, alpha, beta);
          }
      }
    }
  }
}

}  // namespace

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  run(ta, tb, m, n, k, alpha, reinterpret_cast<const uint16_t*>(a), lda, reinterpret_cast<const uint16_t*>(b), ldb,
      beta, c, ldc);
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  run(ta, tb, m, n, k, alpha, reinterpret_cast<const uint16_t*>(a), lda, reinterpret_cast<const uint16_t*>(b), ldb,
      beta, reinterpret_cast<uint16_t*>(c), ldc);
}

}  // namespace lockstep::cpu::avx512_bf16

#pragma GCC pop_options
