// bfloat16 fused attention on AVX512-BF16 (tensor/cpu/attention.h): FlashAttention-2 as
// cpu/attention.cpp, with every tile product a vdpbf16ps kernel (float32 accumulators, 32 multiply-adds
// of bfloat16 pairs per instruction) and everything else in float32: scores, the online softmax, the
// logsumexp, the output and gradient accumulators. The weights P and dS are rounded to bfloat16 for the
// products that read them (PyTorch's CPU kernel does the same); q, k, v, out and the gradients are read
// and written as bfloat16.
//
// vdpbf16ps multiplies pairs of adjacent depths: the operand broadcast from memory (A) needs its two
// depths side by side, the vector operand (B) 16 columns of pairs ([depth / 2][column][2], VNNI). The
// products are laid out so that A is always a row of q, k, v as stored or a buffer written here:
// - scores are computed transposed, S^T [keys, queries] = K Q^T: A is K's rows, B is the query tile's
//   pairs transposed, packed once per query tile (forward) or per head (backward); the softmax then
//   runs down the columns, 16 queries per vector, with no horizontal sums;
// - O += P V, dQ += dS K: P and dS are written as interleaved key pairs, V and K interleaved by rows;
// - dV += P^T dO, dK += dS^T Q: P^T and dS^T rows (pairs of queries) against dO and Q interleaved;
// - dP^T = V dO^T: A is V's rows, B is dO's pairs transposed.
// Compiled for AVX-512 with BF16 by a target pragma, every header first (tensor/cpu/isa.h says why).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/attention_ops.h"
#include "tensor/cpu/attention.h"
#include "tensor/dtype.h"
#include "tensor/elementwise_ops.h"
#include "tensor/parallel.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,prefer-vector-width=512")

#include "tensor/cpu/pack_bf16.h"  // after the pragma: compiled for its target (pack_bf16.h says why)

namespace lockstep::cpu::avx512_bf16 {
namespace {

// Query rows and key columns of a tile: the score tile (64 x 64 float32) stays in L1.
constexpr int64_t kTile = 64;
// The micro-kernel's tile of C: kMR rows x kNV vectors of 16 columns (16 accumulators: Zen 4 retires
// one 512-bit vdpbf16ps a cycle, and 16 independent chains cover its latency).
constexpr int kMR = 4, kNV = 4;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C[rows, cols] = alpha * A B (+ C where accumulate): pair (r, q) of A at a + r * rs + q * qs (bfloat16
// units), B as [kp][ldb] pairs from b, zero past its columns; cols <= 16 * NV, a partial vector masked.
template <int MR, int NV>
void micro_kernel(int64_t kp, const uint16_t* a, int64_t rs, int64_t qs, const uint32_t* b, int64_t ldb, float* c,
                  int64_t ldc, int64_t cols, float alpha, bool accumulate) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t q = 0; q < kp; ++q, a += qs, b += ldb) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + v * 16);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(pair_at(a + r * rs)));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  for (int v = 0; v < NV; ++v) {
    const int64_t left = std::clamp<int64_t>(cols - v * 16, 0, 16);
    const __mmask16 m = left == 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    for (int r = 0; r < MR; ++r) {
      float* cp = c + r * ldc + v * 16;
      __m512 out = _mm512_mul_ps(acc[r][v], al);
      if (accumulate) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(m, cp));
      _mm512_mask_storeu_ps(cp, m, out);
    }
  }
}

template <int MR>
void micro_cols(int64_t kp, const uint16_t* a, int64_t rs, int64_t qs, const uint32_t* b, int64_t ldb, float* c,
                int64_t ldc, int64_t cols, float alpha, bool accumulate) {
  static_assert(kNV == 4);
  if (cols > 48) micro_kernel<MR, 4>(kp, a, rs, qs, b, ldb, c, ldc, cols, alpha, accumulate);
  else if (cols > 32) micro_kernel<MR, 3>(kp, a, rs, qs, b, ldb, c, ldc, cols, alpha, accumulate);
  else if (cols > 16) micro_kernel<MR, 2>(kp, a, rs, qs, b, ldb, c, ldc, cols, alpha, accumulate);
  else micro_kernel<MR, 1>(kp, a, rs, qs, b, ldb, c, ldc, cols, alpha, accumulate);
}

// C[m, n] = alpha * A B (+ C where accumulate), A and B as micro_kernel reads them. Only rows < m of A
// are read (it may be q, k or v itself).
void tile_product(int64_t m, int64_t n, int64_t kp, const uint16_t* a, int64_t rs, int64_t qs, const uint32_t* b,
                  int64_t ldb, float* c, int64_t ldc, float alpha, bool accumulate) {
  static_assert(kMR == 4);
  for (int64_t j = 0; j < n; j += 16 * kNV) {
    const int64_t cols = std::min<int64_t>(16 * kNV, n - j);
    for (int64_t i = 0; i < m; i += kMR) {
      const uint16_t* ai = a + i * rs;
      float* ci = c + i * ldc + j;
      switch (std::min<int64_t>(kMR, m - i)) {
        case 4: micro_cols<4>(kp, ai, rs, qs, b + j, ldb, ci, ldc, cols, alpha, accumulate); break;
        case 3: micro_cols<3>(kp, ai, rs, qs, b + j, ldb, ci, ldc, cols, alpha, accumulate); break;
        case 2: micro_cols<2>(kp, ai, rs, qs, b + j, ldb, ci, ldc, cols, alpha, accumulate); break;
        default: micro_cols<1>(kp, ai, rs, qs, b + j, ldb, ci, ldc, cols, alpha, accumulate); break;
      }
    }
  }
}

// The float32 tile p [rows][kTile] (first `lanes` columns, a multiple of 16) rounded to bfloat16 as
// A operands: `plain` row by row ([rows][kTile]: pairs of columns), `pairs` rows interleaved
// ([(rows + 1) / 2][kTile] pairs: pairs of rows, the odd last row paired with 0).
void round_rows(const float* p, int64_t rows, int64_t lanes, uint16_t* plain) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < lanes; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(plain + r * kTile + c),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(p + r * kTile + c)));
}
void round_pairs(const float* p, int64_t rows, int64_t lanes, uint32_t* pairs) {
  alignas(64) static const uint16_t kIdx[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kIdx);
  for (int64_t q = 0; q < (rows + 1) / 2; ++q)
    for (int64_t c = 0; c < lanes; c += 16) {
      const __m512 x0 = _mm512_loadu_ps(p + 2 * q * kTile + c);
      const __m512 x1 = 2 * q + 1 < rows ? _mm512_loadu_ps(p + (2 * q + 1) * kTile + c) : _mm512_setzero_ps();
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);  // x0's 16 halves, then x1's
      _mm512_storeu_si512(pairs + q * kTile + c, _mm512_permutexvar_epi16(idx, both));
    }
}

const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }

// st[r][c] for key rows r < nk and query columns c < nq: the mask (query i0 + c, key j0 + r) where one
// is given or the causal diagonal crosses the tile.
void mask_tile(const AttentionArgs& a, const void* mask, float* st, int64_t b, int64_t h, int64_t i0, int64_t nq,
               int64_t j0, int64_t nk) {
  if (a.mask_kind == AttentionMask::None && !(a.is_causal && j0 + nk - 1 > i0)) return;
  for (int64_t r = 0; r < nk; ++r)
    for (int64_t c = 0; c < nq; ++c)
      st[r * kTile + c] = lockstep::detail::attention_masked_score<float>(a, mask, st[r * kTile + c], b, h, i0 + c, j0 + r);
}

// keep[r][c] = 1 / (1 - p) where dropout keeps weight (query i0 + c, key j0 + r) of head (b, h), else 0.
void dropout_tile(const AttentionArgs& a, float* keep, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0,
                  int64_t nk) {
  const float scale = 1.f / (1.f - static_cast<float>(a.dropout_p));
  std::fill(keep, keep + nk * kTile, 0.f);
  for (int64_t c = 0; c < nq; ++c) {
    const uint64_t row = static_cast<uint64_t>(((b * a.Hq + h) * a.L + i0 + c) * a.S + j0);
    for (int64_t r = 0; r < nk; ++r)
      keep[r * kTile + c] =
          lockstep::detail::attention_keep(a.seed, a.offset, row + r, static_cast<float>(a.dropout_p)) ? scale : 0.f;
  }
}

struct ForwardScratch {
  std::vector<uint32_t> qt, pp, vi;
  std::vector<float> st, keep, acc;
  alignas(64) float m[kTile], l[kTile], mref[kTile], corr[kTile], sum[kTile];
  ForwardScratch(const AttentionArgs& a)
      : qt(a.E / 2 * kTile), pp(kTile / 2 * kTile), vi(kTile / 2 * round_up(a.Ev, 32)), st(kTile * kTile),
        keep(kTile * kTile), acc(kTile * a.Ev) {}
};

void forward_tile(const AttentionArgs& a, const BFloat16* q, const BFloat16* k, const BFloat16* v, const void* mask,
                  BFloat16* out, float* lse, int64_t b, int64_t h, int64_t i0, ForwardScratch& w) {
  const int64_t nq = std::min(kTile, a.L - i0), lanes = round_up(nq, 16), hk = h / a.group(), E = a.E, Ev = a.Ev;
  const int64_t vw = round_up(Ev, 32);
  const uint16_t* kb = bits(k) + b * a.k.batch + hk * a.k.head;
  const uint16_t* vb = bits(v) + b * a.v.batch + hk * a.v.head;
  transpose_pairs(bits(q) + b * a.q.batch + h * a.q.head + i0 * a.q.row, a.q.row, nq, E, kTile, w.qt.data());
  float *st = w.st.data(), *acc = w.acc.data(), *m = w.m, *l = w.l;
  std::fill(acc, acc + nq * Ev, 0.f);
  std::fill(m, m + kTile, -INFINITY);
  std::fill(l, l + kTile, 0.f);
  const int64_t s_end = a.is_causal ? std::min(a.S, i0 + nq) : a.S;  // query i sees keys j <= i
  for (int64_t j0 = 0; j0 < s_end; j0 += kTile) {
    const int64_t nk = std::min(kTile, s_end - j0);
    // S^T [nk, lanes] = scale K Q^T
    tile_product(nk, lanes, E / 2, kb + j0 * a.k.row, a.k.row, 2, w.qt.data(), kTile, st, kTile,
                 static_cast<float>(a.scale), false);
    mask_tile(a, mask, st, b, h, i0, nq, j0, nk);
    // Online softmax down the columns: m, l per query.
    float* mref = w.mref;
    for (int64_t c = 0; c < lanes; ++c) mref[c] = m[c];
    for (int64_t r = 0; r < nk; ++r) {
      const float* sr = st + r * kTile;
      for (int64_t c = 0; c < lanes; ++c) mref[c] = sr[c] > mref[c] ? sr[c] : mref[c];
    }
    for (int64_t c = 0; c < lanes; ++c) {
      const float m_new = mref[c];
      mref[c] = m_new == -INFINITY ? 0.f : m_new;  // every score so far masked: exp(score) is 0
      w.corr[c] = math::exp(m[c] - mref[c]);        // 0 while m[c] is still -inf
      m[c] = m_new;
      w.sum[c] = 0.f;
    }
    for (int64_t r = 0; r < nk; ++r) {
      float* sr = st + r * kTile;
      for (int64_t c = 0; c < lanes; ++c) {
        sr[c] = math::exp(sr[c] - mref[c]);
        w.sum[c] += sr[c];
      }
    }
    for (int64_t c = 0; c < lanes; ++c) l[c] = l[c] * w.corr[c] + w.sum[c];  // the sum before dropout
    if (a.dropout_p > 0) {
      dropout_tile(a, w.keep.data(), b, h, i0, nq, j0, nk);
      for (int64_t i = 0; i < nk * kTile; ++i) st[i] *= w.keep[i];
    }
    for (int64_t c = 0; c < nq; ++c) {
      if (w.corr[c] == 1.f) continue;
      float* ar = acc + c * Ev;
      for (int64_t e = 0; e < Ev; ++e) ar[e] *= w.corr[c];
    }
    // O [nq, Ev] += P V: P as key pairs, V's rows interleaved.
    round_pairs(st, nk, lanes, w.pp.data());
    interleave_row_pairs(vb + j0 * a.v.row, a.v.row, nk, Ev, vw, w.vi.data());
    tile_product(nq, Ev, (nk + 1) / 2, reinterpret_cast<const uint16_t*>(w.pp.data()), 2, 2 * kTile, w.vi.data(),
                 vw, acc, Ev, 1.f, true);
  }
  BFloat16* op = out + b * a.out.batch + h * a.out.head + i0 * a.out.row;
  float* lp = lse + (b * a.Hq + h) * a.L + i0;
  for (int64_t c = 0; c < nq; ++c) {
    // A row that may attend nowhere gives 0 (and lse -inf), as PyTorch's fused kernels, not NaN.
    const float inv = l[c] > 0.f ? 1.f / l[c] : 0.f;
    for (int64_t e = 0; e < Ev; ++e) op[c * a.out.row + e] = BFloat16(acc[c * Ev + e] * inv);
    lp[c] = l[c] > 0.f ? m[c] + std::log(l[c]) : -INFINITY;
  }
}

// Query tile t of query head g of a group, packed once for every key tile of backward: Q and dO with
// their pairs transposed (B of S^T and dP^T), and interleaved by rows (B of dK and dV).
struct QueryTile {
  uint32_t *qt, *got, *qi, *goi;
};

struct BackwardScratch {
  std::vector<uint32_t> packed, ki, dsi;
  std::vector<uint16_t> pr, dsr;
  std::vector<float> st, dpt, keep, dq, dk, dv, D;
  alignas(64) float lr[kTile], dl[kTile];
};

void backward_group(const AttentionArgs& a, const BFloat16* q, const BFloat16* k, const BFloat16* v, const void* mask,
                    const BFloat16* out, const float* lse, const BFloat16* grad_out, BFloat16* dq, BFloat16* dk,
                    BFloat16* dv, int64_t b, int64_t hk, BackwardScratch& w) {
  const int64_t G = a.group(), L = a.L, S = a.S, E = a.E, Ev = a.Ev, h0 = hk * G;
  const int64_t tiles = (L + kTile - 1) / kTile, ew = round_up(E, 32), vw = round_up(Ev, 32);
  const float scale = static_cast<float>(a.scale);
  // Per query tile: qt [E/2][kTile], got [Ev/2][kTile], qi [kTile/2][ew], goi [kTile/2][vw].
  const int64_t per_tile = (E / 2 + Ev / 2) * kTile + kTile / 2 * (ew + vw);
  w.packed.resize(G * tiles * per_tile);
  auto tile_of = [&](int64_t g, int64_t t) {
    uint32_t* base = w.packed.data() + (g * tiles + t) * per_tile;
    QueryTile qt{base, base + E / 2 * kTile, nullptr, nullptr};
    qt.qi = qt.got + Ev / 2 * kTile;
    qt.goi = qt.qi + kTile / 2 * ew;
    return qt;
  };
  w.D.assign(G * L, 0.f);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t h = h0 + g;
    const uint16_t* qh = bits(q) + b * a.q.batch + h * a.q.head;
    const uint16_t* goh = bits(grad_out) + b * a.grad_out.batch + h * a.grad_out.head;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i0 = t * kTile, nq = std::min(kTile, L - i0);
      const QueryTile p = tile_of(g, t);
      transpose_pairs(qh + i0 * a.q.row, a.q.row, nq, E, kTile, p.qt);
      transpose_pairs(goh + i0 * a.grad_out.row, a.grad_out.row, nq, Ev, kTile, p.got);
      interleave_row_pairs(qh + i0 * a.q.row, a.q.row, nq, E, ew, p.qi);
      interleave_row_pairs(goh + i0 * a.grad_out.row, a.grad_out.row, nq, Ev, vw, p.goi);
    }
    for (int64_t i = 0; i < L; ++i) {  // D = rowsum(dO * O)
      const BFloat16* o = out + b * a.out.batch + h * a.out.head + i * a.out.row;
      const BFloat16* go = grad_out + b * a.grad_out.batch + h * a.grad_out.head + i * a.grad_out.row;
      float d = 0.f;
      for (int64_t e = 0; e < Ev; ++e) d += float(o[e]) * float(go[e]);
      w.D[g * L + i] = d;
    }
  }
  w.ki.resize(kTile / 2 * ew);
  w.pr.resize(kTile * kTile);
  w.dsr.resize(kTile * kTile);
  w.dsi.resize(kTile * kTile / 2);
  w.st.resize(kTile * kTile);
  w.dpt.resize(kTile * kTile);
  w.keep.resize(kTile * kTile);
  w.dq.assign(G * L * E, 0.f);
  w.dk.resize(kTile * E);
  w.dv.resize(kTile * Ev);
  const uint16_t* kb = bits(k) + b * a.k.batch + hk * a.k.head;
  const uint16_t* vb = bits(v) + b * a.v.batch + hk * a.v.head;
  float *st = w.st.data(), *dpt = w.dpt.data(), *keep = w.keep.data();
  uint16_t *pr = w.pr.data(), *dsr = w.dsr.data();
  const uint16_t* dsi = reinterpret_cast<const uint16_t*>(w.dsi.data());
  for (int64_t j0 = 0; j0 < S; j0 += kTile) {
    const int64_t nk = std::min(kTile, S - j0), kpk = (nk + 1) / 2;
    const uint16_t* kp = kb + j0 * a.k.row;
    const uint16_t* vp = vb + j0 * a.v.row;
    interleave_row_pairs(kp, a.k.row, nk, E, ew, w.ki.data());
    std::fill(w.dk.begin(), w.dk.end(), 0.f);
    std::fill(w.dv.begin(), w.dv.end(), 0.f);
    for (int64_t g = 0; g < G; ++g) {
      const int64_t h = h0 + g;
      // Causal: only query rows i >= j0 see this tile.
      for (int64_t t = a.is_causal ? j0 / kTile : 0; t < tiles; ++t) {
        const int64_t i0 = t * kTile, nq = std::min(kTile, L - i0), lanes = round_up(nq, 16), kpq = (nq + 1) / 2;
        const QueryTile p = tile_of(g, t);
        const float* lp = lse + (b * a.Hq + h) * L + i0;
        for (int64_t c = 0; c < lanes; ++c) w.dl[c] = c < nq ? w.D[g * L + i0 + c] : 0.f;
        // S^T [nk, lanes] = scale K Q^T, then P^T = exp(S^T - lse): +inf for a row that attends nowhere
        // and for the lanes past nq, so their weights are 0.
        tile_product(nk, lanes, E / 2, kp, a.k.row, 2, p.qt, kTile, st, kTile, scale, false);
        mask_tile(a, mask, st, b, h, i0, nq, j0, nk);
        for (int64_t c = 0; c < lanes; ++c) w.lr[c] = c < nq && lp[c] != -INFINITY ? lp[c] : INFINITY;
        for (int64_t r = 0; r < nk; ++r) {
          float* sr = st + r * kTile;
          for (int64_t c = 0; c < lanes; ++c) sr[c] = math::exp(sr[c] - w.lr[c]);
        }
        // dV [nk, Ev] += P^T dO, P with dropout's mask (the weights O was made from).
        if (a.dropout_p > 0) {
          dropout_tile(a, keep, b, h, i0, nq, j0, nk);
          for (int64_t i = 0; i < nk * kTile; ++i) dpt[i] = st[i] * keep[i];
          round_rows(dpt, nk, lanes, pr);
        } else {
          round_rows(st, nk, lanes, pr);
        }
        tile_product(nk, Ev, kpq, pr, kTile, 2, p.goi, vw, w.dv.data(), Ev, 1.f, true);
        // dP^T [nk, lanes] = V dO^T; dS^T = P^T (dP^T - D), dP through dropout's mask.
        tile_product(nk, lanes, Ev / 2, vp, a.v.row, 2, p.got, kTile, dpt, kTile, 1.f, false);
        for (int64_t r = 0; r < nk; ++r) {
          float* dr = dpt + r * kTile;
          const float* sr = st + r * kTile;
          if (a.dropout_p > 0) {
            const float* kr = keep + r * kTile;
            for (int64_t c = 0; c < lanes; ++c) dr[c] = sr[c] * (dr[c] * kr[c] - w.dl[c]);
          } else {
            for (int64_t c = 0; c < lanes; ++c) dr[c] = sr[c] * (dr[c] - w.dl[c]);
          }
        }
        round_rows(dpt, nk, lanes, dsr);
        round_pairs(dpt, nk, lanes, w.dsi.data());
        // dK [nk, E] += scale dS^T Q; dQ [nq, E] += scale dS K.
        tile_product(nk, E, kpq, dsr, kTile, 2, p.qi, ew, w.dk.data(), E, scale, true);
        tile_product(nq, E, kpk, dsi, 2, 2 * kTile, w.ki.data(), ew, w.dq.data() + (g * L + i0) * E, E, scale, true);
      }
    }
    BFloat16* dkp = dk + b * a.dk.batch + hk * a.dk.head + j0 * a.dk.row;
    BFloat16* dvp = dv + b * a.dv.batch + hk * a.dv.head + j0 * a.dv.row;
    for (int64_t r = 0; r < nk; ++r) {
      for (int64_t e = 0; e < E; ++e) dkp[r * a.dk.row + e] = BFloat16(w.dk[r * E + e]);
      for (int64_t e = 0; e < Ev; ++e) dvp[r * a.dv.row + e] = BFloat16(w.dv[r * Ev + e]);
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    BFloat16* dqh = dq + b * a.dq.batch + (h0 + g) * a.dq.head;
    for (int64_t i = 0; i < L; ++i)
      for (int64_t e = 0; e < E; ++e) dqh[i * a.dq.row + e] = BFloat16(w.dq[(g * L + i) * E + e]);
  }
}

}  // namespace

bool attention_applies(const AttentionArgs& a) { return a.E % 2 == 0 && a.Ev % 2 == 0; }

void attention_forward(const AttentionArgs& a, const BFloat16* q, const BFloat16* k, const BFloat16* v,
                       const void* mask, BFloat16* out, float* lse) {
  const int64_t tiles = (a.L + kTile - 1) / kTile;
  parallel_for(0, a.B * a.Hq * tiles, 1, [&](int64_t t0, int64_t t1) {
    ForwardScratch w(a);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / tiles;
      forward_tile(a, q, k, v, mask, out, lse, bh / a.Hq, bh % a.Hq, (t % tiles) * kTile, w);
    }
  });
}

void attention_backward(const AttentionArgs& a, const BFloat16* q, const BFloat16* k, const BFloat16* v,
                        const void* mask, const BFloat16* out, const float* lse, const BFloat16* grad_out,
                        BFloat16* dq, BFloat16* dk, BFloat16* dv) {
  parallel_for(0, a.B * a.Hkv, 1, [&](int64_t t0, int64_t t1) {
    BackwardScratch w;
    for (int64_t t = t0; t < t1; ++t)
      backward_group(a, q, k, v, mask, out, lse, grad_out, dq, dk, dv, t / a.Hkv, t % a.Hkv, w);
  });
}

}  // namespace lockstep::cpu::avx512_bf16

#pragma GCC pop_options
