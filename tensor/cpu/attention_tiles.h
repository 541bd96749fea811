// The CPU fused attention kernels' tile steps, written once for both: the float32/float64 kernel
// (cpu/attention.cpp, built per ISA) and the bfloat16 one on AVX512-BF16 (cpu/attention_bf16_avx512.cpp).
// Each step applies tensor/attention_ops.h's per-element or per-row rule over a score tile: the mask,
// dropout's factors, the online softmax's update, backward's weights from the logsumexp and dS.
//
// What differs between the kernels is the tile's layout, a template parameter here: attention.cpp
// keeps S [queries][keys] (a query's scores are a row, reduced by its per-ISA row_max and row_sum),
// attention_bf16_avx512.cpp S^T [keys][queries] (16 queries per vector, the softmax down the columns,
// its lanes past the tile's queries padded to a whole vector). Tiles are kTile x kTile with row stride
// kTile. Every step is forced inline: the callers are compiled for their own ISA (tensor/cpu/isa.h)
// and the loops vectorise with its instructions only when inlined there.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tensor/attention_ops.h"
#include "tensor/elementwise_ops.h"

#define LOCKSTEP_TILE_INLINE inline __attribute__((always_inline))

namespace lockstep::cpu::attention_tiles {

// Query rows and key columns of a tile: a 64 x 64 score tile of floats (16 KiB) stays in L1 beside the
// K and V tiles (64 x 32 each) of the GPT's heads.
constexpr int64_t kTile = 64;

// A tile's shape in either layout: its rows and columns for nq queries (lanes: nq rounded up to the
// transposed layout's vectors) and nk keys, and the query and key of element (row x, column y).
template <bool kTransposed>
struct TileLayout {
  static constexpr int64_t rows(int64_t nq, int64_t nk) { return kTransposed ? nk : nq; }
  static constexpr int64_t cols(int64_t nq, int64_t nk) { return kTransposed ? nq : nk; }
  static constexpr int64_t query(int64_t x, int64_t y) { return kTransposed ? y : x; }
  static constexpr int64_t key(int64_t x, int64_t y) { return kTransposed ? x : y; }
};

// The scores of queries [i0, i0 + nq) and keys [j0, j0 + nk) of head (b, h) masked, where a mask is
// given or the causal diagonal crosses the tile.
template <bool kTransposed, typename A>
LOCKSTEP_TILE_INLINE void mask_tile(const AttentionArgs& a, const void* mask, A* s, int64_t b, int64_t h, int64_t i0,
                                    int64_t nq, int64_t j0, int64_t nk) {
  using L = TileLayout<kTransposed>;
  if (a.mask_kind == AttentionMask::None && !(a.is_causal && j0 + nk - 1 > i0)) return;
  for (int64_t x = 0; x < L::rows(nq, nk); ++x)
    for (int64_t y = 0; y < L::cols(nq, nk); ++y) {
      A& v = s[x * kTile + y];
      v = lockstep::detail::attention_masked_score<A>(a, mask, v, b, h, i0 + L::query(x, y), j0 + L::key(x, y));
    }
}

// keep = dropout's factor of each weight of queries [i0, i0 + nq) and keys [j0, j0 + nk) of head (b, h),
// 0 elsewhere in the tile's rows.
template <bool kTransposed, typename A>
LOCKSTEP_TILE_INLINE void dropout_tile(const AttentionArgs& a, A* keep, int64_t b, int64_t h, int64_t i0, int64_t nq,
                                       int64_t j0, int64_t nk) {
  using L = TileLayout<kTransposed>;
  std::fill(keep, keep + L::rows(nq, nk) * kTile, A(0));
  for (int64_t x = 0; x < L::rows(nq, nk); ++x)
    for (int64_t y = 0; y < L::cols(nq, nk); ++y)
      keep[x * kTile + y] =
          lockstep::detail::attention_keep_factor<A>(a, b, h, i0 + L::query(x, y), j0 + L::key(x, y));
}

// dst = s * keep over rows x cols of a tile: the weights with dropout applied.
template <typename A>
LOCKSTEP_TILE_INLINE void times_keep(A* dst, const A* s, const A* __restrict keep, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * kTile + c] = s[r * kTile + c] * keep[r * kTile + c];
}

// One row-block's online softmax state, per query of the tile (tensor/attention_ops.h's rule): the
// running maximum and sum, and the step's new maximum, shift, block sum and rescale factor.
template <typename A>
struct OnlineSoftmax {
  alignas(64) A m[kTile], l[kTile], m_new[kTile], shift[kTile], sum[kTile], corr[kTile];
  LOCKSTEP_TILE_INLINE void reset() {
    std::fill(m, m + kTile, A(-INFINITY));
    std::fill(l, l + kTile, A(0));
  }
};

// The row-major layout's reductions along a row (row_max, row_sum of n values at p): the caller's
// per-ISA ones. The transposed layout reduces down the columns, a lane per query, and takes none.
struct NoRowReduce {};

// One key tile of forward's online softmax: s (nq queries, nk keys, masked) becomes the weights
// exp(s - shift), with dropout's factors where keep is given, o's maxima and sums move on, and the
// output accumulator acc [nq][Ev] is rescaled to the new maxima. The transposed layout runs every lane
// (the padded ones too: their weights only reach rows of the products past nq).
template <bool kTransposed, typename A, typename Reduce = NoRowReduce>
LOCKSTEP_TILE_INLINE void softmax_tile(OnlineSoftmax<A>& o, A* __restrict s, const A* __restrict keep,
                                       A* __restrict acc, int64_t Ev, int64_t nq, int64_t nk, int64_t lanes,
                                       const Reduce& reduce = {}) {
  A *__restrict m_new = o.m_new, *__restrict shift = o.shift, *__restrict sum = o.sum;
  const int64_t queries = kTransposed ? lanes : nq;
  if constexpr (kTransposed) {
    for (int64_t c = 0; c < lanes; ++c) m_new[c] = o.m[c];
    for (int64_t r = 0; r < nk; ++r) {
      const A* sr = s + r * kTile;
      for (int64_t c = 0; c < lanes; ++c) m_new[c] = sr[c] > m_new[c] ? sr[c] : m_new[c];
    }
  } else {
    for (int64_t r = 0; r < nq; ++r) m_new[r] = std::max(o.m[r], reduce.row_max(nk, s + r * kTile));
  }
  for (int64_t q = 0; q < queries; ++q) shift[q] = lockstep::detail::attention_softmax_shift(m_new[q]);
  if constexpr (kTransposed) {
    for (int64_t c = 0; c < lanes; ++c) sum[c] = A(0);
    for (int64_t r = 0; r < nk; ++r) {
      A* sr = s + r * kTile;
      for (int64_t c = 0; c < lanes; ++c) {
        sr[c] = math::exp(sr[c] - shift[c]);
        sum[c] += sr[c];
      }
    }
  } else {
    for (int64_t r = 0; r < nq; ++r) {
      A* sr = s + r * kTile;
      const A sh = shift[r];
      for (int64_t c = 0; c < nk; ++c) sr[c] = math::exp(sr[c] - sh);
      sum[r] = reduce.row_sum(nk, sr);
    }
  }
  // The sums are taken before dropout, as softmax's.
  for (int64_t q = 0; q < queries; ++q)
    o.corr[q] = lockstep::detail::attention_softmax_update(o.m[q], o.l[q], m_new[q], sum[q]);
  for (int64_t q = 0; q < nq; ++q) {
    const A corr = o.corr[q];
    if (corr == A(1)) continue;
    A* ar = acc + q * Ev;
    for (int64_t e = 0; e < Ev; ++e) ar[e] *= corr;
  }
  using L = TileLayout<kTransposed>;
  if (keep) times_keep(s, s, keep, L::rows(nq, nk), L::cols(lanes, nk));
}

// The output rows [nq][Ev] (row stride ld) acc scaled by their softmax sums, and their logsumexp.
template <typename A, typename T>
LOCKSTEP_TILE_INLINE void finish_rows(const OnlineSoftmax<A>& o, const A* acc, int64_t Ev, int64_t nq, T* out,
                                      int64_t ld, A* lse) {
  for (int64_t r = 0; r < nq; ++r) {
    const A inv = lockstep::detail::attention_out_scale(o.l[r]);
    T* orow = out + r * ld;
    const A* ar = acc + r * Ev;
    for (int64_t e = 0; e < Ev; ++e) orow[e] = static_cast<T>(ar[e] * inv);
    lse[r] = lockstep::detail::attention_row_lse(o.m[r], o.l[r]);
  }
}

// Backward's weights P = exp(s - lse) of nq queries (their logsumexp at lse) and nk keys, in place;
// shift is kTile of scratch. Lanes past nq get weight 0.
template <bool kTransposed, typename A>
LOCKSTEP_TILE_INLINE void weights_tile(A* __restrict s, const A* lse, A* __restrict shift, int64_t nq, int64_t nk,
                                       int64_t lanes) {
  using L = TileLayout<kTransposed>;
  for (int64_t q = 0; q < (kTransposed ? lanes : nq); ++q)
    shift[q] = q < nq ? lockstep::detail::attention_lse_shift(lse[q]) : A(INFINITY);
  for (int64_t x = 0; x < L::rows(nq, nk); ++x) {
    A* sx = s + x * kTile;
    for (int64_t y = 0; y < L::cols(lanes, nk); ++y) sx[y] = math::exp(sx[y] - shift[L::query(x, y)]);
  }
}

// dp = dS = P (dP - D) in place over rows x cols of a tile, dP through dropout's factors where keep is
// given; d holds D per query (the transposed layout's padded lanes included).
template <bool kTransposed, typename A>
LOCKSTEP_TILE_INLINE void score_grad_tile(A* __restrict dp, const A* __restrict p, const A* __restrict keep,
                                          const A* __restrict d, int64_t rows, int64_t cols) {
  using L = TileLayout<kTransposed>;
  for (int64_t x = 0; x < rows; ++x) {
    A* dx = dp + x * kTile;
    const A* px = p + x * kTile;
    if (keep) {
      const A* kx = keep + x * kTile;
      for (int64_t y = 0; y < cols; ++y)
        dx[y] = lockstep::detail::attention_score_grad(px[y], dx[y] * kx[y], d[L::query(x, y)]);
    } else {
      for (int64_t y = 0; y < cols; ++y)
        dx[y] = lockstep::detail::attention_score_grad(px[y], dx[y], d[L::query(x, y)]);
    }
  }
}

}  // namespace lockstep::cpu::attention_tiles

#undef LOCKSTEP_TILE_INLINE
