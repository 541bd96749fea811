// Fused attention on the CPU (tensor/cpu/attention.h), FlashAttention-2 (Dao, 2023) over tiles of
// kTile query rows and kTile key columns, so no [L, S] matrix is ever held:
// - forward, per (batch, head, query tile): S = scale Q K^T for one key tile, masked; the running row
//   maximum m and sum l are updated (online softmax) and the output tile O = O * exp(m_old - m_new) +
//   exp(S - m_new) V accumulated; at the end O / l and the row's logsumexp m + log(l) are written.
// - backward, per (batch, key/value head), key tiles outermost: each tile's probabilities recomputed
//   from the saved logsumexp, P = exp(S - lse); dV += P^T dO, dP = dO V^T, dS = P (dP - D) with
//   D = rowsum(dO * O), dK += scale dS^T Q, dQ += scale dS K. One task owns a key/value head and all
//   the query heads that read it, so dQ, dK and dV have one writer each and no locks.
// The tile products go to small_gemm (registers hold C, no packing of A); shapes it leaves out (a
// head size that is not a whole number of vectors) to plain loops. Causal tiles above the diagonal
// are skipped. Every header is included before LOCKSTEP_ISA_BEGIN (tensor/cpu/isa.h says why).
#include "tensor/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/attention_ops.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"
#include "tensor/cpu/small_gemm.h"
#include "tensor/elementwise_ops.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

// Rows and columns of a score tile: S and P of 64 x 64 floats (16 KiB) stay in L1 beside the K and V
// tiles (64 x 32 each) of the GPT's heads.
constexpr int64_t kTile = 64;

// C = alpha * op(A) op(B) + beta * C (tensor/cpu/gemm.h's convention).
template <typename T>
void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
               int64_t ldb, T beta, T* c, int64_t ldc) {
  if (small_gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  for (int64_t i = 0; i < m; ++i) {
    T* __restrict cr = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) cr[j] = beta == T(0) ? T(0) : beta * cr[j];
    for (int64_t p = 0; p < k; ++p) {
      const T av = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);
      if (tb) {
        for (int64_t j = 0; j < n; ++j) cr[j] += av * b[j * ldb + p];
      } else {
        const T* __restrict br = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
      }
    }
  }
}

// Rows [i0, i0 + nq) by columns [j0, j0 + nk) of the scores in s (row stride kTile): the mask applied
// where one is given or the causal diagonal crosses the tile.
template <typename T>
void mask_tile(const AttentionArgs& a, const void* mask, T* s, int64_t b, int64_t h, int64_t i0, int64_t nq,
               int64_t j0, int64_t nk) {
  if (a.mask_kind == AttentionMask::None && !(a.is_causal && j0 + nk - 1 > i0)) return;
  for (int64_t r = 0; r < nq; ++r)
    for (int64_t c = 0; c < nk; ++c)
      s[r * kTile + c] = lockstep::detail::attention_masked_score<T>(a, mask, s[r * kTile + c], b, h, i0 + r, j0 + c);
}

// keep[r, c] = 1 / (1 - p) where dropout keeps element (i0 + r, j0 + c) of head (b, h), else 0.
template <typename T>
void dropout_tile(const AttentionArgs& a, T* keep, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0,
                  int64_t nk) {
  const T scale = T(1) / (T(1) - static_cast<T>(a.dropout_p));
  for (int64_t r = 0; r < nq; ++r) {
    const uint64_t row = static_cast<uint64_t>(((b * a.Hq + h) * a.L + i0 + r) * a.S + j0);
    for (int64_t c = 0; c < nk; ++c)
      keep[r * kTile + c] = lockstep::detail::attention_keep(a.seed, a.offset, row + c, static_cast<float>(a.dropout_p))
                                ? scale
                                : T(0);
  }
}

template <typename T>
void forward_tile(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, T* out, T* lse,
                  int64_t b, int64_t h, int64_t i0, T* s, T* keep, T* acc, T* m, T* l) {
  const int64_t nq = std::min(kTile, a.L - i0), hk = h / a.group(), E = a.E, Ev = a.Ev;
  const T* qp = q + b * a.q.batch + h * a.q.head + i0 * a.q.row;
  const T* kb = k + b * a.k.batch + hk * a.k.head;
  const T* vb = v + b * a.v.batch + hk * a.v.head;
  const T scale = static_cast<T>(a.scale), kNegInf = T(-INFINITY);
  std::fill(acc, acc + nq * Ev, T(0));
  std::fill(m, m + nq, kNegInf);
  std::fill(l, l + nq, T(0));
  const int64_t s_end = a.is_causal ? std::min(a.S, i0 + nq) : a.S;  // row i sees j <= i
  for (int64_t j0 = 0; j0 < s_end; j0 += kTile) {
    const int64_t nk = std::min(kTile, s_end - j0);
    tile_gemm<T>(false, true, nq, nk, E, scale, qp, a.q.row, kb + j0 * a.k.row, a.k.row, T(0), s, kTile);
    mask_tile(a, mask, s, b, h, i0, nq, j0, nk);
    if (a.dropout_p > 0) dropout_tile(a, keep, b, h, i0, nq, j0, nk);
    for (int64_t r = 0; r < nq; ++r) {
      T* __restrict sr = s + r * kTile;
      const T m_new = std::max(m[r], row_max<T>(nk, sr));
      if (m_new == kNegInf) {  // every score so far masked: nothing to add yet
        std::fill(sr, sr + nk, T(0));
        continue;
      }
      const T corr = math::exp(m[r] - m_new);  // 0 while m[r] is still -inf
      for (int64_t c = 0; c < nk; ++c) sr[c] = math::exp(sr[c] - m_new);
      l[r] = l[r] * corr + row_sum<T>(nk, kIdentity, sr);  // the sum before dropout, as softmax's
      m[r] = m_new;
      if (corr != T(1)) {
        T* __restrict ar = acc + r * Ev;
        for (int64_t c = 0; c < Ev; ++c) ar[c] *= corr;
      }
      if (a.dropout_p > 0) {
        const T* __restrict kr = keep + r * kTile;
        for (int64_t c = 0; c < nk; ++c) sr[c] *= kr[c];
      }
    }
    tile_gemm<T>(false, false, nq, Ev, nk, T(1), s, kTile, vb + j0 * a.v.row, a.v.row, T(1), acc, Ev);
  }
  T* op = out + b * a.out.batch + h * a.out.head + i0 * a.out.row;
  T* lp = lse + (b * a.Hq + h) * a.L + i0;
  for (int64_t r = 0; r < nq; ++r) {
    // A row that may attend nowhere gives 0 (and lse -inf), as PyTorch's fused kernels, not NaN.
    const T inv = l[r] > T(0) ? T(1) / l[r] : T(0);
    T* __restrict orow = op + r * a.out.row;
    const T* __restrict ar = acc + r * Ev;
    for (int64_t c = 0; c < Ev; ++c) orow[c] = ar[c] * inv;
    lp[r] = l[r] > T(0) ? m[r] + std::log(l[r]) : kNegInf;
  }
}

// All of backward for key/value head hk of batch b.
template <typename T>
void backward_head(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, const T* out,
                   const T* lse, const T* grad_out, T* dq, T* dk, T* dv, int64_t b, int64_t hk, std::vector<T>& buf) {
  const int64_t G = a.group(), E = a.E, Ev = a.Ev, L = a.L;
  const T scale = static_cast<T>(a.scale), kNegInf = T(-INFINITY);
  const int64_t tile = kTile * kTile;
  buf.resize(4 * tile + kTile * (E + Ev) + G * L);
  T *s = buf.data(), *dp = s + tile, *keep = dp + tile, *pd = keep + tile, *dk_acc = pd + tile,
    *dv_acc = dk_acc + kTile * E, *D = dv_acc + kTile * Ev;
  for (int64_t g = 0; g < G; ++g) {  // D = rowsum(dO * O) of each query row
    const int64_t h = hk * G + g;
    for (int64_t i = 0; i < L; ++i) {
      const T* o = out + b * a.out.batch + h * a.out.head + i * a.out.row;
      const T* go = grad_out + b * a.grad_out.batch + h * a.grad_out.head + i * a.grad_out.row;
      D[g * L + i] = row_sum<T>(Ev, [](auto x, auto y) { return x * y; }, o, go);
    }
  }
  const T* kb = k + b * a.k.batch + hk * a.k.head;
  const T* vb = v + b * a.v.batch + hk * a.v.head;
  for (int64_t j0 = 0; j0 < a.S; j0 += kTile) {
    const int64_t nk = std::min(kTile, a.S - j0);
    const T* kp = kb + j0 * a.k.row;
    const T* vp = vb + j0 * a.v.row;
    std::fill(dk_acc, dk_acc + nk * E, T(0));
    std::fill(dv_acc, dv_acc + nk * Ev, T(0));
    for (int64_t g = 0; g < G; ++g) {
      const int64_t h = hk * G + g;
      // Causal: only query rows i >= j0 see this tile.
      for (int64_t i0 = a.is_causal ? j0 / kTile * kTile : 0; i0 < L; i0 += kTile) {
        const int64_t nq = std::min(kTile, L - i0);
        const T* qp = q + b * a.q.batch + h * a.q.head + i0 * a.q.row;
        const T* gop = grad_out + b * a.grad_out.batch + h * a.grad_out.head + i0 * a.grad_out.row;
        T* dqp = dq + b * a.dq.batch + h * a.dq.head + i0 * a.dq.row;
        const T* lp = lse + (b * a.Hq + h) * L + i0;
        tile_gemm<T>(false, true, nq, nk, E, scale, qp, a.q.row, kp, a.k.row, T(0), s, kTile);
        mask_tile(a, mask, s, b, h, i0, nq, j0, nk);
        for (int64_t r = 0; r < nq; ++r) {  // P = exp(S - lse)
          T* __restrict sr = s + r * kTile;
          const T lr = lp[r];
          if (lr == kNegInf) std::fill(sr, sr + nk, T(0));
          else
            for (int64_t c = 0; c < nk; ++c) sr[c] = math::exp(sr[c] - lr);
        }
        const T* p_used = s;  // the weights O was made from: P, or P with dropout's mask
        if (a.dropout_p > 0) {
          dropout_tile(a, keep, b, h, i0, nq, j0, nk);
          for (int64_t r = 0; r < nq; ++r)
            for (int64_t c = 0; c < nk; ++c) pd[r * kTile + c] = s[r * kTile + c] * keep[r * kTile + c];
          p_used = pd;
        }
        tile_gemm<T>(true, false, nk, Ev, nq, T(1), p_used, kTile, gop, a.grad_out.row, T(1), dv_acc, Ev);
        tile_gemm<T>(false, true, nq, nk, Ev, T(1), gop, a.grad_out.row, vp, a.v.row, T(0), dp, kTile);
        for (int64_t r = 0; r < nq; ++r) {  // dS = P (dP - D), dP through dropout's mask
          T* __restrict dr = dp + r * kTile;
          const T* __restrict sr = s + r * kTile;
          const T Dr = D[g * L + i0 + r];
          if (a.dropout_p > 0) {
            const T* __restrict kr = keep + r * kTile;
            for (int64_t c = 0; c < nk; ++c) dr[c] = sr[c] * (dr[c] * kr[c] - Dr);
          } else {
            for (int64_t c = 0; c < nk; ++c) dr[c] = sr[c] * (dr[c] - Dr);
          }
        }
        tile_gemm<T>(true, false, nk, E, nq, scale, dp, kTile, qp, a.q.row, T(1), dk_acc, E);
        tile_gemm<T>(false, false, nq, E, nk, scale, dp, kTile, kp, a.k.row, T(1), dqp, a.dq.row);
      }
    }
    T* dkp = dk + b * a.dk.batch + hk * a.dk.head + j0 * a.dk.row;
    T* dvp = dv + b * a.dv.batch + hk * a.dv.head + j0 * a.dv.row;
    for (int64_t c = 0; c < nk; ++c) {
      std::copy(dk_acc + c * E, dk_acc + (c + 1) * E, dkp + c * a.dk.row);
      std::copy(dv_acc + c * Ev, dv_acc + (c + 1) * Ev, dvp + c * a.dv.row);
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, T* out,
                       T* lse) {
  const int64_t tiles = (a.L + kTile - 1) / kTile;
  parallel_for(0, a.B * a.Hq * tiles, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> buf(2 * kTile * kTile + kTile * (a.Ev + 2));
    T *s = buf.data(), *keep = s + kTile * kTile, *acc = keep + kTile * kTile, *m = acc + kTile * a.Ev,
      *l = m + kTile;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / tiles;
      forward_tile(a, q, k, v, mask, out, lse, bh / a.Hq, bh % a.Hq, (t % tiles) * kTile, s, keep, acc, m, l);
    }
  });
}

template <typename T>
void attention_backward(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, const T* out,
                        const T* lse, const T* grad_out, T* dq, T* dk, T* dv) {
  parallel_for(0, a.B * a.Hkv, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> buf;
    for (int64_t t = t0; t < t1; ++t)
      backward_head(a, q, k, v, mask, out, lse, grad_out, dq, dk, dv, t / a.Hkv, t % a.Hkv, buf);
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                                  \
  template void attention_forward<T>(const AttentionArgs&, const T*, const T*, const T*, const void*, T*, T*); \
  template void attention_backward<T>(const AttentionArgs&, const T*, const T*, const T*, const void*, const T*, \
                                      const T*, const T*, T*, T*, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

LOCKSTEP_ISA_END
