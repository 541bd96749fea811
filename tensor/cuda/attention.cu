// Fused attention on CUDA devices (tensor/backend.h's attention_forward and attention_backward): a
// row-per-thread fallback, untiled, until a GPU measures a tiled kernel. One kernel each way, one thread
// per row, its accumulators in registers (rows up to kMaxHead wide; nn's dispatch composes wider heads);
// every per-element and per-row rule (mask, dropout's counter and factor, the online softmax's update,
// the finished row, dS) is tensor/attention_ops.h's, the one the CPU kernels run.
// - forward: thread (b, h, i) streams the keys with an online softmax (running max and sum), writing
//   the output row and its logsumexp;
// - backward: the grid's y = 0 half gives thread (b, h, i) query row i's dq (sum over keys of
//   dS_ij k_j), the y = 1 half thread (b, hkv, j) key row j's dk and dv (sums over the query rows of
//   every head that reads it). Each recomputes P_ij = exp(s_ij - lse_i) and dS_ij = P_ij (dP_ij - D_i)
//   with D_i = dO_i . O_i; every gradient has one writer: no atomics, the same bits each run.
// Operands of bfloat16 and float16 are loaded as such and computed in float32 (attention_acc_t: the
// accumulators, the logsumexp), each result rounded once when it is stored.
#include <algorithm>
#include <cmath>

#include "tensor/attention_ops.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/elementwise_ops.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// tensor/attention_ops.h's rules.
using lockstep::detail::attention_keep_factor;
using lockstep::detail::attention_out_scale;
using lockstep::detail::attention_row_lse;
using lockstep::detail::attention_score_grad;
using lockstep::detail::attention_softmax_shift;
using lockstep::detail::attention_softmax_update;

constexpr int kMaxHead = kAttentionMaxHead;  // cuda_backend.h: limits() tells nn

template <typename T, typename A = attention_acc_t<T>>
__device__ A dot(const T* a, const T* b, int64_t n) {
  A s = 0;
  for (int64_t c = 0; c < n; ++c) s += static_cast<A>(a[c]) * static_cast<A>(b[c]);
  return s;
}

// Score (i, j) of head (b, h) after scale and mask, by the shared rule.
template <typename T, typename A = attention_acc_t<T>>
__device__ A score(const AttentionArgs& a, const void* mask, const T* qi, const T* kj, int64_t b, int64_t h, int64_t i,
                   int64_t j) {
  return lockstep::detail::attention_masked_score<A>(a, mask, dot(qi, kj, a.E) * static_cast<A>(a.scale), b, h, i, j);
}

// Row i of head (b, h) of an operand laid out as `lay`.
template <typename P>
__device__ P* row_of(P* base, const AttentionArgs::Layout& lay, int64_t b, int64_t h, int64_t i) {
  return base + b * lay.batch + h * lay.head + i * lay.row;
}

template <typename T, typename A = attention_acc_t<T>>
__global__ void attention_forward_kernel(AttentionArgs a, const T* q, const T* k, const T* v, const void* mask, T* out,
                                         A* lse) {
  LOCKSTEP_GRID_STRIDE(row, a.B * a.Hq * a.L) {
    const int64_t i = row % a.L, h = row / a.L % a.Hq, b = row / (a.L * a.Hq), hk = h / a.group();
    const T* qi = q + b * a.q.batch + h * a.q.head + i * a.q.row;
    const T* kb = k + b * a.k.batch + hk * a.k.head;
    const T* vb = v + b * a.v.batch + hk * a.v.head;
    A acc[kMaxHead];
    for (int64_t c = 0; c < a.Ev; ++c) acc[c] = 0;
    A m = A(-INFINITY), l = 0;
    const int64_t s_end = a.is_causal ? (i + 1 < a.S ? i + 1 : a.S) : a.S;
    for (int64_t j = 0; j < s_end; ++j) {
      const A s = score(a, mask, qi, kb + j * a.k.row, b, h, i, j);
      if (s == A(-INFINITY)) continue;
      const A m_new = s > m ? s : m, p = math::exp(s - attention_softmax_shift(m_new));
      const A corr = attention_softmax_update(m, l, m_new, p);
      const A pk = p * attention_keep_factor<A>(a, b, h, i, j);
      const T* vj = vb + j * a.v.row;
      for (int64_t c = 0; c < a.Ev; ++c) acc[c] = acc[c] * corr + pk * static_cast<A>(vj[c]);
    }
    const A inv = attention_out_scale(l);
    T* o = out + b * a.out.batch + h * a.out.head + i * a.out.row;
    for (int64_t c = 0; c < a.Ev; ++c) o[c] = static_cast<T>(acc[c] * inv);
    lse[row] = attention_row_lse(m, l);
  }
}

template <typename T, typename A = attention_acc_t<T>>
__global__ void attention_backward_kernel(AttentionArgs a, const T* q, const T* k, const T* v, const void* mask,
                                          const T* out, const A* lse, const T* grad_out, T* dq, T* dk, T* dv) {
  const A scale = static_cast<A>(a.scale);
  if (blockIdx.y == 0) {  // dq of query row (b, h, i)
    LOCKSTEP_GRID_STRIDE(row, a.B * a.Hq * a.L) {
      const int64_t i = row % a.L, h = row / a.L % a.Hq, b = row / (a.L * a.Hq), hk = h / a.group();
      const T *qi = row_of(q, a.q, b, h, i), *goi = row_of(grad_out, a.grad_out, b, h, i);
      const A Di = dot(goi, row_of(out, a.out, b, h, i), a.Ev), li = lse[row];
      A acc[kMaxHead];
      for (int64_t c = 0; c < a.E; ++c) acc[c] = 0;
      const int64_t s_end = li == A(-INFINITY) ? 0 : a.is_causal ? (i + 1 < a.S ? i + 1 : a.S) : a.S;
      for (int64_t j = 0; j < s_end; ++j) {
        const T* kj = row_of(k, a.k, b, hk, j);
        const A p = math::exp(score(a, mask, qi, kj, b, h, i, j) - li);
        const A dp = dot(goi, row_of(v, a.v, b, hk, j), a.Ev) * attention_keep_factor<A>(a, b, h, i, j);
        const A ds = attention_score_grad(p, dp, Di);
        for (int64_t c = 0; c < a.E; ++c) acc[c] += ds * static_cast<A>(kj[c]);
      }
      T* d = row_of(dq, a.dq, b, h, i);
      for (int64_t c = 0; c < a.E; ++c) d[c] = static_cast<T>(scale * acc[c]);
    }
  } else {  // dk and dv of key row (b, hk, j)
    LOCKSTEP_GRID_STRIDE(row, a.B * a.Hkv * a.S) {
      const int64_t j = row % a.S, hk = row / a.S % a.Hkv, b = row / (a.S * a.Hkv);
      const T *kj = row_of(k, a.k, b, hk, j), *vj = row_of(v, a.v, b, hk, j);
      A acc_k[kMaxHead], acc_v[kMaxHead];
      for (int64_t c = 0; c < a.E; ++c) acc_k[c] = 0;
      for (int64_t c = 0; c < a.Ev; ++c) acc_v[c] = 0;
      for (int64_t h = hk * a.group(); h < (hk + 1) * a.group(); ++h) {
        for (int64_t i = a.is_causal ? j : 0; i < a.L; ++i) {
          const A li = lse[(b * a.Hq + h) * a.L + i];
          if (li == A(-INFINITY)) continue;
          const T *qi = row_of(q, a.q, b, h, i), *goi = row_of(grad_out, a.grad_out, b, h, i);
          const A p = math::exp(score(a, mask, qi, kj, b, h, i, j) - li);
          const A f = attention_keep_factor<A>(a, b, h, i, j);
          const A Di = dot(goi, row_of(out, a.out, b, h, i), a.Ev);
          const A ds = attention_score_grad(p, dot(goi, vj, a.Ev) * f, Di);
          for (int64_t c = 0; c < a.Ev; ++c) acc_v[c] += p * f * static_cast<A>(goi[c]);
          for (int64_t c = 0; c < a.E; ++c) acc_k[c] += ds * static_cast<A>(qi[c]);
        }
      }
      T *dkj = row_of(dk, a.dk, b, hk, j), *dvj = row_of(dv, a.dv, b, hk, j);
      for (int64_t c = 0; c < a.E; ++c) dkj[c] = static_cast<T>(scale * acc_k[c]);
      for (int64_t c = 0; c < a.Ev; ++c) dvj[c] = static_cast<T>(acc_v[c]);
    }
  }
}

void check_head(const AttentionArgs& a, const char* op) {
  LOCKSTEP_CHECK(a.E <= kMaxHead && a.Ev <= kMaxHead, op, ": CUDA heads are at most ", kMaxHead,
                 " wide, got E = ", a.E, ", Ev = ", a.Ev);
}

}  // namespace

void CudaBackend::attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, const AttentionArgs& args) {
  check_head(args, "attention_forward");
  const int64_t rows = args.B * args.Hq * args.L;
  if (rows == 0) return;
  OnDevice on(q.device());
  dispatch_any_floating(q.dtype(), "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("attention_forward", attention_forward_kernel<T>, grid_for(rows, on.ctx, 128), 128, on.stream(),
                    args, q.data<T>(), k.data<T>(), v.data<T>(), mask.defined() ? mask.data_ptr() : nullptr,
                    out.data<T>(), lse.data<attention_acc_t<T>>());
  });
}

void CudaBackend::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& grad_out, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
                                     const Tensor& lse, const AttentionArgs& args) {
  check_head(args, "attention_backward");
  const int64_t rows = std::max(args.B * args.Hq * args.L, args.B * args.Hkv * args.S);
  if (rows == 0) return;
  OnDevice on(q.device());
  dispatch_any_floating(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(grid_for(rows, on.ctx, 128), 2);
    LOCKSTEP_LAUNCH("attention_backward", attention_backward_kernel<T>, grid, 128, on.stream(), args, q.data<T>(),
                    k.data<T>(), v.data<T>(), mask.defined() ? mask.data_ptr() : nullptr, out.data<T>(),
                    lse.data<attention_acc_t<T>>(), grad_out.data<T>(), dq.data<T>(), dk.data<T>(), dv.data<T>());
  });
}

}  // namespace lockstep::cuda::detail
