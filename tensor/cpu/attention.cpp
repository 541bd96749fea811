// Fused attention on the CPU (tensor/cpu/attention.h), FlashAttention-2 (Dao, 2023) over tiles of
// kTile query rows and kTile key columns, so no [L, S] matrix is ever held:
// - forward, per (batch, head, query tile): S = scale Q K^T for one key tile, masked; the running row
//   maximum m and sum l are updated (online softmax) and the output tile O = O * exp(m_old - m_new) +
//   exp(S - m_new) V accumulated; at the end O / l and the row's logsumexp m + log(l) are written.
// - backward, per (batch, key/value head), key tiles outermost: each tile's probabilities recomputed
//   from the saved logsumexp, P = exp(S - lse); dV += P^T dO, dP = dO V^T, dS = P (dP - D) with
//   D = rowsum(dO * O), dK += scale dS^T Q, dQ += scale dS K. One task owns a key/value head and all
//   the query heads that read it, so dQ, dK and dV have one writer each and no locks.
// The steps over a score tile (mask, dropout, the online softmax, backward's weights and dS) are
// attention_tiles.h's, shared with attention_bf16_avx512.cpp. The tile products go to small_gemm
// (registers hold C, no packing of A); shapes it leaves out (a head size that is not a whole number of
// vectors) to plain loops. Causal tiles above the diagonal
// are skipped. bfloat16 and float16 operands (attention_acc_t: computed in float32) are converted to
// float32 a tile at a time in forward and a head group at a time in backward, and the results
// rounded once: float16 always, bfloat16 where the CPU lacks AVX512-BF16 (attention_bf16_avx512.cpp
// runs it there). Every header is included before LOCKSTEP_ISA_BEGIN (tensor/cpu/isa.h says why).
#include "tensor/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tensor/attention_ops.h"
#include "tensor/cpu/attention_tiles.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"
#include "tensor/cpu/small_gemm.h"
#include "tensor/dtype.h"
#include "tensor/elementwise_ops.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

using attention_tiles::kTile;
using attention_tiles::OnlineSoftmax;

// Scores as S [queries][keys], not transposed (attention_tiles.h's layouts): a query's row is reduced by
// this ISA's row_max and row_sum.
constexpr bool kTransposed = false;
struct RowReduce {
  template <typename A>
  A row_max(int64_t n, const A* p) const {
    return cpu::LOCKSTEP_ISA_NAMESPACE::row_max<A>(n, p);
  }
  template <typename A>
  A row_sum(int64_t n, const A* p) const {
    return cpu::LOCKSTEP_ISA_NAMESPACE::row_sum<A>(n, kIdentity, p);
  }
};

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

// rows x cols of src (row stride ld) as A: src itself when T is A, else converted into buf (row
// stride cols, which ld becomes).
template <typename A, typename T>
const A* as_acc(const T* src, int64_t& ld, int64_t rows, int64_t cols, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    return src;
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) buf[r * cols + c] = static_cast<A>(src[r * ld + c]);
    ld = cols;
    return buf;
  }
}

// One task's scratch for forward_tile: the score and dropout tiles, the output accumulator, the online
// softmax's state, and (16-bit operands) the query, key and value tiles converted to A.
template <typename A>
struct ForwardScratch {
  std::vector<A> buf;
  A *s, *keep, *acc, *qt, *kt, *vt;
  OnlineSoftmax<A> softmax;
  ForwardScratch(int64_t E, int64_t Ev) : buf(2 * kTile * kTile + kTile * Ev + kTile * (2 * E + Ev)) {
    s = buf.data(), keep = s + kTile * kTile, acc = keep + kTile * kTile;
    qt = acc + kTile * Ev, kt = qt + kTile * E, vt = kt + kTile * E;
  }
};

template <typename T, typename A = attention_acc_t<T>>
void forward_tile(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, T* out, A* lse,
                  int64_t b, int64_t h, int64_t i0, ForwardScratch<A>& w) {
  const int64_t nq = std::min(kTile, a.L - i0), hk = h / a.group(), E = a.E, Ev = a.Ev;
  int64_t ldq = a.q.row;
  const A* qp = as_acc(q + b * a.q.batch + h * a.q.head + i0 * a.q.row, ldq, nq, E, w.qt);
  const T* kb = k + b * a.k.batch + hk * a.k.head;
  const T* vb = v + b * a.v.batch + hk * a.v.head;
  const A scale = static_cast<A>(a.scale);
  A *s = w.s, *acc = w.acc;
  std::fill(acc, acc + nq * Ev, A(0));
  w.softmax.reset();
  const int64_t s_end = a.is_causal ? std::min(a.S, i0 + nq) : a.S;  // row i sees j <= i
  for (int64_t j0 = 0; j0 < s_end; j0 += kTile) {
    const int64_t nk = std::min(kTile, s_end - j0);
    int64_t ldk = a.k.row, ldv = a.v.row;
    const A* kp = as_acc(kb + j0 * a.k.row, ldk, nk, E, w.kt);
    const A* vp = as_acc(vb + j0 * a.v.row, ldv, nk, Ev, w.vt);
    tile_gemm<A>(false, true, nq, nk, E, scale, qp, ldq, kp, ldk, A(0), s, kTile);
    attention_tiles::mask_tile<kTransposed>(a, mask, s, b, h, i0, nq, j0, nk);
    const A* keep = nullptr;
    if (a.dropout_p > 0) {
      attention_tiles::dropout_tile<kTransposed>(a, w.keep, b, h, i0, nq, j0, nk);
      keep = w.keep;
    }
    attention_tiles::softmax_tile<kTransposed>(w.softmax, s, keep, acc, Ev, nq, nk, nq, RowReduce{});
    tile_gemm<A>(false, false, nq, Ev, nk, A(1), s, kTile, vp, ldv, A(1), acc, Ev);
  }
  attention_tiles::finish_rows(w.softmax, acc, Ev, nq, out + b * a.out.batch + h * a.out.head + i0 * a.out.row,
                               a.out.row, lse + (b * a.Hq + h) * a.L + i0);
}

// One key/value head hk of batch b and the G query heads that read it, as backward_head reads them:
// pointers at query head hk * G (q, out, grad_out, dq, lse) or at head hk (k, v, dk, dv); query head g
// of the group at g * <x>.head, row i at i * <x>.row, lse at g * L + i. dq is accumulated into.
template <typename A>
struct HeadGroup {
  const A *q, *k, *v, *out, *go, *lse;
  A *dq, *dk, *dv;
  AttentionArgs::Layout lq, lk, lv, lout, lgo, ldq, ldk, ldv;
};

// All of backward for key/value head hk of batch b (a gives the sizes, the mask and dropout).
template <typename A>
void backward_head(const AttentionArgs& a, const void* mask, const HeadGroup<A>& p, int64_t b, int64_t hk,
                   std::vector<A>& buf) {
  const int64_t G = a.group(), E = a.E, Ev = a.Ev, L = a.L;
  const A scale = static_cast<A>(a.scale);
  const int64_t tile = kTile * kTile;
  alignas(64) A shift[kTile];
  buf.resize(4 * tile + kTile * (E + Ev) + G * L);
  A *s = buf.data(), *dp = s + tile, *keep = dp + tile, *pd = keep + tile, *dk_acc = pd + tile,
    *dv_acc = dk_acc + kTile * E, *D = dv_acc + kTile * Ev;
  for (int64_t g = 0; g < G; ++g) {  // D = rowsum(dO * O) of each query row
    for (int64_t i = 0; i < L; ++i) {
      const A* o = p.out + g * p.lout.head + i * p.lout.row;
      const A* go = p.go + g * p.lgo.head + i * p.lgo.row;
      D[g * L + i] = row_sum<A>(Ev, [](auto x, auto y) { return x * y; }, o, go);
    }
  }
  for (int64_t j0 = 0; j0 < a.S; j0 += kTile) {
    const int64_t nk = std::min(kTile, a.S - j0);
    const A* kp = p.k + j0 * p.lk.row;
    const A* vp = p.v + j0 * p.lv.row;
    std::fill(dk_acc, dk_acc + nk * E, A(0));
    std::fill(dv_acc, dv_acc + nk * Ev, A(0));
    for (int64_t g = 0; g < G; ++g) {
      const int64_t h = hk * G + g;
      // Causal: only query rows i >= j0 see this tile.
      for (int64_t i0 = a.is_causal ? j0 / kTile * kTile : 0; i0 < L; i0 += kTile) {
        const int64_t nq = std::min(kTile, L - i0);
        const A* qp = p.q + g * p.lq.head + i0 * p.lq.row;
        const A* gop = p.go + g * p.lgo.head + i0 * p.lgo.row;
        A* dqp = p.dq + g * p.ldq.head + i0 * p.ldq.row;
        tile_gemm<A>(false, true, nq, nk, E, scale, qp, p.lq.row, kp, p.lk.row, A(0), s, kTile);
        attention_tiles::mask_tile<kTransposed>(a, mask, s, b, h, i0, nq, j0, nk);
        attention_tiles::weights_tile<kTransposed>(s, p.lse + g * L + i0, shift, nq, nk, nq);
        const A* p_used = s;  // the weights O was made from: P, or P with dropout's factors
        const A* keep_used = nullptr;
        if (a.dropout_p > 0) {
          attention_tiles::dropout_tile<kTransposed>(a, keep, b, h, i0, nq, j0, nk);
          attention_tiles::times_keep(pd, s, keep, nq, nk);
          p_used = pd, keep_used = keep;
        }
        tile_gemm<A>(true, false, nk, Ev, nq, A(1), p_used, kTile, gop, p.lgo.row, A(1), dv_acc, Ev);
        tile_gemm<A>(false, true, nq, nk, Ev, A(1), gop, p.lgo.row, vp, p.lv.row, A(0), dp, kTile);
        attention_tiles::score_grad_tile<kTransposed>(dp, s, keep_used, D + g * L + i0, nq, nk);
        tile_gemm<A>(true, false, nk, E, nq, scale, dp, kTile, qp, p.lq.row, A(1), dk_acc, E);
        tile_gemm<A>(false, false, nq, E, nk, scale, dp, kTile, kp, p.lk.row, A(1), dqp, p.ldq.row);
      }
    }
    A* dkp = p.dk + j0 * p.ldk.row;
    A* dvp = p.dv + j0 * p.ldv.row;
    for (int64_t c = 0; c < nk; ++c) {
      std::copy(dk_acc + c * E, dk_acc + (c + 1) * E, dkp + c * p.ldk.row);
      std::copy(dv_acc + c * Ev, dv_acc + (c + 1) * Ev, dvp + c * p.ldv.row);
    }
  }
}

// rows [n, cols] of head (batch b, head h) of x (layout l) converted into dst, contiguous.
template <typename A, typename T>
void head_to_acc(const T* x, const AttentionArgs::Layout& l, int64_t b, int64_t h, int64_t n, int64_t cols, A* dst) {
  const T* base = x + b * l.batch + h * l.head;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<A>(base[r * l.row + c]);
}
template <typename A, typename T>
void head_from_acc(const A* src, const AttentionArgs::Layout& l, int64_t b, int64_t h, int64_t n, int64_t cols, T* x) {
  T* base = x + b * l.batch + h * l.head;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < cols; ++c) base[r * l.row + c] = static_cast<T>(src[r * cols + c]);
}

// backward_head for key/value head hk of batch b, operands stored as T: float32 and float64 in place;
// bfloat16 and float16 converted to float32 for the group (k, v, and q, out, grad_out of its G query
// heads), the gradients accumulated in float32 and rounded once.
template <typename T>
void backward_group(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, const T* out,
                    const attention_acc_t<T>* lse, const T* grad_out, T* dq, T* dk, T* dv, int64_t b, int64_t hk,
                    std::vector<attention_acc_t<T>>& buf, std::vector<attention_acc_t<T>>& conv) {
  using A = attention_acc_t<T>;
  const int64_t G = a.group(), h0 = hk * G, L = a.L, S = a.S, E = a.E, Ev = a.Ev;
  const A* lp = lse + (b * a.Hq + h0) * L;
  if constexpr (std::is_same_v<T, A>) {
    const HeadGroup<A> p{q + b * a.q.batch + h0 * a.q.head, k + b * a.k.batch + hk * a.k.head,
                         v + b * a.v.batch + hk * a.v.head, out + b * a.out.batch + h0 * a.out.head,
                         grad_out + b * a.grad_out.batch + h0 * a.grad_out.head, lp,
                         dq + b * a.dq.batch + h0 * a.dq.head, dk + b * a.dk.batch + hk * a.dk.head,
                         dv + b * a.dv.batch + hk * a.dv.head, a.q, a.k, a.v, a.out, a.grad_out, a.dq, a.dk, a.dv};
    backward_head(a, mask, p, b, hk, buf);
  } else {
    const int64_t nq = G * L * E, nv = G * L * Ev;
    conv.assign(2 * nq + 2 * nv + 2 * S * E + 2 * S * Ev, A(0));
    A *cq = conv.data(), *cdq = cq + nq, *cout = cdq + nq, *cgo = cout + nv, *ck = cgo + nv, *cdk = ck + S * E,
      *cv = cdk + S * E, *cdv = cv + S * Ev;
    for (int64_t g = 0; g < G; ++g) {
      head_to_acc(q, a.q, b, h0 + g, L, E, cq + g * L * E);
      head_to_acc(out, a.out, b, h0 + g, L, Ev, cout + g * L * Ev);
      head_to_acc(grad_out, a.grad_out, b, h0 + g, L, Ev, cgo + g * L * Ev);
    }
    head_to_acc(k, a.k, b, hk, S, E, ck);
    head_to_acc(v, a.v, b, hk, S, Ev, cv);
    const AttentionArgs::Layout le{0, L * E, E}, lv{0, L * Ev, Ev}, se{0, 0, E}, sv{0, 0, Ev};
    const HeadGroup<A> p{cq, ck, cv, cout, cgo, lp, cdq, cdk, cdv, le, se, sv, lv, lv, le, se, sv};
    backward_head(a, mask, p, b, hk, buf);
    for (int64_t g = 0; g < G; ++g) head_from_acc(cdq + g * L * E, a.dq, b, h0 + g, L, E, dq);
    head_from_acc(cdk, a.dk, b, hk, S, E, dk);
    head_from_acc(cdv, a.dv, b, hk, S, Ev, dv);
  }
}

}  // namespace

template <typename T>
void attention_forward(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, T* out,
                       attention_acc_t<T>* lse) {
  const int64_t tiles = (a.L + kTile - 1) / kTile;
  parallel_for(0, a.B * a.Hq * tiles, 1, [&](int64_t t0, int64_t t1) {
    ForwardScratch<attention_acc_t<T>> w(a.E, a.Ev);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / tiles;
      forward_tile(a, q, k, v, mask, out, lse, bh / a.Hq, bh % a.Hq, (t % tiles) * kTile, w);
    }
  });
}

template <typename T>
void attention_backward(const AttentionArgs& a, const T* q, const T* k, const T* v, const void* mask, const T* out,
                        const attention_acc_t<T>* lse, const T* grad_out, T* dq, T* dk, T* dv) {
  parallel_for(0, a.B * a.Hkv, 1, [&](int64_t t0, int64_t t1) {
    std::vector<attention_acc_t<T>> buf, conv;
    for (int64_t t = t0; t < t1; ++t)
      backward_group(a, q, k, v, mask, out, lse, grad_out, dq, dk, dv, t / a.Hkv, t % a.Hkv, buf, conv);
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                            \
  template void attention_forward<T>(const AttentionArgs&, const T*, const T*, const T*, const void*, T*,  \
                                     attention_acc_t<T>*);                                                 \
  template void attention_backward<T>(const AttentionArgs&, const T*, const T*, const T*, const void*,      \
                                      const T*, const attention_acc_t<T>*, const T*, T*, T*, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
LOCKSTEP_INSTANTIATE(BFloat16)
LOCKSTEP_INSTANTIATE(Float16)
#undef LOCKSTEP_INSTANTIATE

LOCKSTEP_ISA_END
