// bfloat16 fused attention on AVX512-BF16 (tensor/cpu/attention.h): FlashAttention-2 as
// cpu/attention.cpp, with every tile product a vdpbf16ps kernel (float32 accumulators, 32 multiply-adds
// of bfloat16 pairs per instruction) and everything else in float32: scores, the online softmax, the
// logsumexp, the output and gradient accumulators. The weights P and dS are rounded to bfloat16 for the
// products that read them (PyTorch's CPU kernel does the same); q, k, v, out and the gradients are read
// and written as bfloat16. The steps over a score tile (mask, dropout, the online softmax, backward's
// weights and dS) are attention_tiles.h's, shared with cpu/attention.cpp, and the products' kernel is
// the bfloat16 GEMM's (micro_kernel_bf16.h).
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
#include "tensor/cpu/attention_tiles.h"
#include "tensor/dtype.h"
#include "tensor/elementwise_ops.h"
#include "tensor/parallel.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,prefer-vector-width=512")

#include "tensor/cpu/micro_kernel_bf16.h"  // after the pragma: compiled for its target (pack_bf16.h says why)
#include "tensor/cpu/pack_bf16.h"

namespace lockstep::cpu::avx512_bf16 {
namespace {

using attention_tiles::kTile;
// Scores as S^T [keys][queries] (attention_tiles.h's transposed layout).
constexpr bool kTransposed = true;
// The micro-kernel's tile of C: up to kMR rows x 4 vectors of 16 columns (16 accumulators: Zen 4 retires
// one 512-bit vdpbf16ps a cycle, and 16 independent chains cover its latency).
constexpr int kMR = 4;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C[m, n] = alpha * A B (+ C where accumulate): pair (r, q) of A at a + r * rs + q * qs (bfloat16
// units), B as [kp][ldb] pairs from b, zero past its columns. Only rows < m of A are read (it may be q,
// k or v itself).
void tile_product(int64_t m, int64_t n, int64_t kp, const uint16_t* a, int64_t rs, int64_t qs, const uint32_t* b,
                  int64_t ldb, float* c, int64_t ldc, float alpha, bool accumulate) {
  static_assert(kMR == 4);
  const float beta = accumulate ? 1.f : 0.f;
  for (int64_t j = 0; j < n; j += 64) {
    const int64_t cols = std::min<int64_t>(64, n - j);
    for (int64_t i = 0; i < m; i += kMR) {
      const uint16_t* ai = a + i * rs;
      float* ci = c + i * ldc + j;
      switch (std::min<int64_t>(kMR, m - i)) {
        case 4: dpbf16_kernel_cols<4, 0>(kp, ai, rs, qs, b + j, ldb, ci, ldc, 4, cols, alpha, beta); break;
        case 3: dpbf16_kernel_cols<3, 0>(kp, ai, rs, qs, b + j, ldb, ci, ldc, 3, cols, alpha, beta); break;
        case 2: dpbf16_kernel_cols<2, 0>(kp, ai, rs, qs, b + j, ldb, ci, ldc, 2, cols, alpha, beta); break;
        default: dpbf16_kernel_cols<1, 0>(kp, ai, rs, qs, b + j, ldb, ci, ldc, 1, cols, alpha, beta); break;
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

struct ForwardScratch {
  std::vector<uint32_t> qt, pp, vi;
  std::vector<float> st, keep, acc;
  attention_tiles::OnlineSoftmax<float> softmax;
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
  float *st = w.st.data(), *acc = w.acc.data();
  std::fill(acc, acc + nq * Ev, 0.f);
  w.softmax.reset();
  const int64_t s_end = a.is_causal ? std::min(a.S, i0 + nq) : a.S;  // query i sees keys j <= i
  for (int64_t j0 = 0; j0 < s_end; j0 += kTile) {
    const int64_t nk = std::min(kTile, s_end - j0);
    // S^T [nk, lanes] = scale K Q^T
    tile_product(nk, lanes, E / 2, kb + j0 * a.k.row, a.k.row, 2, w.qt.data(), kTile, st, kTile,
                 static_cast<float>(a.scale), false);
    attention_tiles::mask_tile<kTransposed>(a, mask, st, b, h, i0, nq, j0, nk);
    const float* keep = nullptr;
    if (a.dropout_p > 0) {
      attention_tiles::dropout_tile<kTransposed>(a, w.keep.data(), b, h, i0, nq, j0, nk);
      keep = w.keep.data();
    }
    attention_tiles::softmax_tile<kTransposed>(w.softmax, st, keep, acc, Ev, nq, nk, lanes);
    // O [nq, Ev] += P V: P as key pairs, V's rows interleaved.
    round_pairs(st, nk, lanes, w.pp.data());
    interleave_row_pairs(vb + j0 * a.v.row, a.v.row, nk, Ev, vw, w.vi.data());
    tile_product(nq, Ev, (nk + 1) / 2, reinterpret_cast<const uint16_t*>(w.pp.data()), 2, 2 * kTile, w.vi.data(),
                 vw, acc, Ev, 1.f, true);
  }
  attention_tiles::finish_rows(w.softmax, acc, Ev, nq, out + b * a.out.batch + h * a.out.head + i0 * a.out.row,
                               a.out.row, lse + (b * a.Hq + h) * a.L + i0);
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

// What every step of backward_group reads: key/value head hk of batch b and its G query heads h0 + g.
struct GroupDims {
  int64_t b, hk, G, L, S, E, Ev, h0, tiles, ew, vw;
  int64_t per_tile;  // uint32s of BackwardScratch::packed per query tile
  float scale;
};

inline GroupDims group_dims(const AttentionArgs& a, int64_t b, int64_t hk) {
  const int64_t G = a.group(), E = a.E, Ev = a.Ev, ew = round_up(E, 32), vw = round_up(Ev, 32);
  // Per query tile: qt [E/2][kTile], got [Ev/2][kTile], qi [kTile/2][ew], goi [kTile/2][vw].
  const int64_t per_tile = (E / 2 + Ev / 2) * kTile + kTile / 2 * (ew + vw);
  return {b, hk, G, a.L, a.S, E, Ev, hk * G, (a.L + kTile - 1) / kTile, ew, vw, per_tile, static_cast<float>(a.scale)};
}

inline QueryTile tile_of(const GroupDims& d, BackwardScratch& w, int64_t g, int64_t t) {
  uint32_t* base = w.packed.data() + (g * d.tiles + t) * d.per_tile;
  QueryTile qt{base, base + d.E / 2 * kTile, nullptr, nullptr};
  qt.qi = qt.got + d.Ev / 2 * kTile;
  qt.goi = qt.qi + kTile / 2 * d.ew;
  return qt;
}

// Key tile [j0, j0 + nk) of the group's K and V.
struct KeyTile {
  int64_t j0, nk, kpk;    // kpk: pairs of keys
  const uint16_t *k, *v;  // row j0 of K and of V
};

// Query tile [i0, i0 + nq) of head h = h0 + g against a key tile: `lanes` columns of S^T, kpq pairs of
// queries.
struct QueryRows {
  int64_t g, h, i0, nq, lanes, kpq;
  QueryTile p;
};

// Packs the group's query tiles once for every key tile, and D = rowsum(dO * O) of every query row.
inline void pack_queries(const AttentionArgs& a, const GroupDims& d, const BFloat16* q, const BFloat16* out,
                         const BFloat16* grad_out, BackwardScratch& w) {
  w.packed.resize(d.G * d.tiles * d.per_tile);
  w.D.assign(d.G * d.L, 0.f);
  for (int64_t g = 0; g < d.G; ++g) {
    const int64_t h = d.h0 + g;
    const uint16_t* qh = bits(q) + d.b * a.q.batch + h * a.q.head;
    const uint16_t* goh = bits(grad_out) + d.b * a.grad_out.batch + h * a.grad_out.head;
    for (int64_t t = 0; t < d.tiles; ++t) {
      const int64_t i0 = t * kTile, nq = std::min(kTile, d.L - i0);
      const QueryTile p = tile_of(d, w, g, t);
      transpose_pairs(qh + i0 * a.q.row, a.q.row, nq, d.E, kTile, p.qt);
      transpose_pairs(goh + i0 * a.grad_out.row, a.grad_out.row, nq, d.Ev, kTile, p.got);
      interleave_row_pairs(qh + i0 * a.q.row, a.q.row, nq, d.E, d.ew, p.qi);
      interleave_row_pairs(goh + i0 * a.grad_out.row, a.grad_out.row, nq, d.Ev, d.vw, p.goi);
    }
    for (int64_t i = 0; i < d.L; ++i) {
      const BFloat16* o = out + d.b * a.out.batch + h * a.out.head + i * a.out.row;
      const BFloat16* go = grad_out + d.b * a.grad_out.batch + h * a.grad_out.head + i * a.grad_out.row;
      float dot = 0.f;
      for (int64_t e = 0; e < d.Ev; ++e) dot += float(o[e]) * float(go[e]);
      w.D[g * d.L + i] = dot;
    }
  }
}

// S^T [nk, lanes] = scale K Q^T into w.st, then P^T = exp(S^T - lse): +inf for a row that attends
// nowhere and for the lanes past nq, so their weights are 0.
inline void recompute_weights(const AttentionArgs& a, const GroupDims& d, const void* mask, const float* lse,
                              const KeyTile& kt, const QueryRows& qr, BackwardScratch& w) {
  float* st = w.st.data();
  const float* lp = lse + (d.b * a.Hq + qr.h) * d.L + qr.i0;
  tile_product(kt.nk, qr.lanes, d.E / 2, kt.k, a.k.row, 2, qr.p.qt, kTile, st, kTile, d.scale, false);
  attention_tiles::mask_tile<kTransposed>(a, mask, st, d.b, qr.h, qr.i0, qr.nq, kt.j0, kt.nk);
  attention_tiles::weights_tile<kTransposed>(st, lp, w.lr, qr.nq, kt.nk, qr.lanes);
}

// dV [nk, Ev] += P^T dO, P with dropout's mask (the weights O was made from); the mask stays in w.keep
// for compute_ds.
inline void accumulate_dv(const AttentionArgs& a, const GroupDims& d, const KeyTile& kt, const QueryRows& qr,
                          BackwardScratch& w) {
  float *st = w.st.data(), *dpt = w.dpt.data(), *keep = w.keep.data();
  if (a.dropout_p > 0) {
    attention_tiles::dropout_tile<kTransposed>(a, keep, d.b, qr.h, qr.i0, qr.nq, kt.j0, kt.nk);
    attention_tiles::times_keep(dpt, st, keep, kt.nk, kTile);
    round_rows(dpt, kt.nk, qr.lanes, w.pr.data());
  } else {
    round_rows(st, kt.nk, qr.lanes, w.pr.data());
  }
  tile_product(kt.nk, d.Ev, qr.kpq, w.pr.data(), kTile, 2, qr.p.goi, d.vw, w.dv.data(), d.Ev, 1.f, true);
}

// dP^T [nk, lanes] = V dO^T into w.dpt, then dS^T = P^T (dP^T - D) in place, dP through dropout's mask;
// rounded to bfloat16 as the A operands of dK (w.dsr, by rows) and dQ (w.dsi, key pairs).
inline void compute_ds(const AttentionArgs& a, const GroupDims& d, const KeyTile& kt, const QueryRows& qr,
                       BackwardScratch& w) {
  const float *st = w.st.data(), *keep = w.keep.data();
  float* dpt = w.dpt.data();
  const int64_t lanes = qr.lanes;
  for (int64_t c = 0; c < lanes; ++c) w.dl[c] = c < qr.nq ? w.D[qr.g * d.L + qr.i0 + c] : 0.f;
  tile_product(kt.nk, lanes, d.Ev / 2, kt.v, a.v.row, 2, qr.p.got, kTile, dpt, kTile, 1.f, false);
  attention_tiles::score_grad_tile<kTransposed>(dpt, st, a.dropout_p > 0 ? keep : nullptr, w.dl, kt.nk, lanes);
  round_rows(dpt, kt.nk, lanes, w.dsr.data());
  round_pairs(dpt, kt.nk, lanes, w.dsi.data());
}

// dK [nk, E] += scale dS^T Q; dQ [nq, E] += scale dS K.
inline void accumulate_dk_dq(const GroupDims& d, const KeyTile& kt, const QueryRows& qr, BackwardScratch& w) {
  const uint16_t* dsi = reinterpret_cast<const uint16_t*>(w.dsi.data());
  tile_product(kt.nk, d.E, qr.kpq, w.dsr.data(), kTile, 2, qr.p.qi, d.ew, w.dk.data(), d.E, d.scale, true);
  tile_product(qr.nq, d.E, kt.kpk, dsi, 2, 2 * kTile, w.ki.data(), d.ew, w.dq.data() + (qr.g * d.L + qr.i0) * d.E,
               d.E, d.scale, true);
}

// One key tile against every query tile of the group that sees it: its dK and dV whole, and its share of
// dQ (in w.dq).
inline void backward_key_tile(const AttentionArgs& a, const GroupDims& d, const void* mask, const float* lse,
                              const KeyTile& kt, BFloat16* dk, BFloat16* dv, BackwardScratch& w) {
  interleave_row_pairs(kt.k, a.k.row, kt.nk, d.E, d.ew, w.ki.data());
  std::fill(w.dk.begin(), w.dk.end(), 0.f);
  std::fill(w.dv.begin(), w.dv.end(), 0.f);
  for (int64_t g = 0; g < d.G; ++g) {
    // Causal: only query rows i >= j0 see this tile.
    for (int64_t t = a.is_causal ? kt.j0 / kTile : 0; t < d.tiles; ++t) {
      const int64_t i0 = t * kTile, nq = std::min(kTile, d.L - i0);
      const QueryRows qr{g, d.h0 + g, i0, nq, round_up(nq, 16), (nq + 1) / 2, tile_of(d, w, g, t)};
      recompute_weights(a, d, mask, lse, kt, qr, w);
      accumulate_dv(a, d, kt, qr, w);
      compute_ds(a, d, kt, qr, w);
      accumulate_dk_dq(d, kt, qr, w);
    }
  }
  BFloat16* dkp = dk + d.b * a.dk.batch + d.hk * a.dk.head + kt.j0 * a.dk.row;
  BFloat16* dvp = dv + d.b * a.dv.batch + d.hk * a.dv.head + kt.j0 * a.dv.row;
  for (int64_t r = 0; r < kt.nk; ++r) {
    for (int64_t e = 0; e < d.E; ++e) dkp[r * a.dk.row + e] = BFloat16(w.dk[r * d.E + e]);
    for (int64_t e = 0; e < d.Ev; ++e) dvp[r * a.dv.row + e] = BFloat16(w.dv[r * d.Ev + e]);
  }
}

// Backward of key/value head hk of batch b and the G query heads that share it: K and V are read once
// per key tile, every query tile of the group is packed once.
void backward_group(const AttentionArgs& a, const BFloat16* q, const BFloat16* k, const BFloat16* v, const void* mask,
                    const BFloat16* out, const float* lse, const BFloat16* grad_out, BFloat16* dq, BFloat16* dk,
                    BFloat16* dv, int64_t b, int64_t hk, BackwardScratch& w) {
  const GroupDims d = group_dims(a, b, hk);
  pack_queries(a, d, q, out, grad_out, w);
  w.ki.resize(kTile / 2 * d.ew);
  w.pr.resize(kTile * kTile);
  w.dsr.resize(kTile * kTile);
  w.dsi.resize(kTile * kTile / 2);
  w.st.resize(kTile * kTile);
  w.dpt.resize(kTile * kTile);
  w.keep.resize(kTile * kTile);
  w.dq.assign(d.G * d.L * d.E, 0.f);
  w.dk.resize(kTile * d.E);
  w.dv.resize(kTile * d.Ev);
  const uint16_t* kb = bits(k) + b * a.k.batch + hk * a.k.head;
  const uint16_t* vb = bits(v) + b * a.v.batch + hk * a.v.head;
  for (int64_t j0 = 0; j0 < d.S; j0 += kTile) {
    const int64_t nk = std::min(kTile, d.S - j0);
    backward_key_tile(a, d, mask, lse, KeyTile{j0, nk, (nk + 1) / 2, kb + j0 * a.k.row, vb + j0 * a.v.row}, dk, dv, w);
  }
  for (int64_t g = 0; g < d.G; ++g) {
    BFloat16* dqh = dq + b * a.dq.batch + (d.h0 + g) * a.dq.head;
    for (int64_t i = 0; i < d.L; ++i)
      for (int64_t e = 0; e < d.E; ++e) dqh[i * a.dq.row + e] = BFloat16(w.dq[(g * d.L + i) * d.E + e]);
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
