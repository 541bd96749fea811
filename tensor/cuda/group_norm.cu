// GroupNorm and its backward (tensor/backend.h states the rule). One block per (n, g) reduces the group
// (sums in double for float inputs, as LayerNorm's and the CPU's) and writes its outputs; the backward's
// per-channel sums, which the weight and bias gradients need too, are kept in scratch [N, C], and one
// thread per channel sums them over the batch. bfloat16 and float16 are read and written at 16 bits and
// computed in float32, with float32 mean and rstd.
#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// The sums' accumulator for compute type C: double for float32 (and 16-bit) inputs.
template <typename C>
using AccT = std::conditional_t<std::is_same_v<C, float>, double, C>;

constexpr unsigned kMaxGrid = 65535;

// A channel's (sum gy, sum gy * (x - mean)), reduced across a block as one value.
template <typename Acc>
struct GradSums {
  Acc b, s;
};

// x, w, b, y of T; mean and rstd of C = compute_t<T>. Group r = n * G + g spans the D * HW values of
// channels [g * D, (g + 1) * D) of sample n.
template <typename T, typename C = compute_t<T>>
__global__ void group_norm_groups(T* y, C* mean, C* rstd, const T* x, const T* w, const T* b, int64_t groups,
                                  int64_t G, int64_t D, int64_t HW, double eps) {
  using Acc = AccT<C>;
  __shared__ Acc ssum[kThreads];
  auto add = [](Acc p, Acc q) { return p + q; };
  const int64_t m = D * HW;
  for (int64_t r = blockIdx.x; r < groups; r += gridDim.x) {
    const T* xr = x + r * m;
    Acc s = 0;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) s += ld(xr[j]);
    const Acc mu = block_reduce(s, add, ssum) / Acc(m);
    Acc v = 0;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) v += (ld(xr[j]) - mu) * (ld(xr[j]) - mu);
    const Acc var = block_reduce(v, add, ssum) / Acc(m);
    const C mf = static_cast<C>(mu), rs = static_cast<C>(1 / sqrt(static_cast<double>(var) + eps));
    if (threadIdx.x == 0) {
      mean[r] = mf;
      rstd[r] = rs;
    }
    const int64_t c0 = (r % G) * D;
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      const int64_t c = c0 + j / HW;
      C o = (ld(xr[j]) - mf) * (w ? rs * ld(w[c]) : rs);
      if (b) o = o + ld(b[c]);
      y[r * m + j] = static_cast<T>(o);
    }
  }
}

// Per group: each channel's sums (into db and ds [N, C] where given), their weighted totals, then gx
// (where given). A channel of fewer than 32 values is one thread's loop; a longer one the block's.
template <typename T, typename C = compute_t<T>>
__global__ void group_norm_backward_groups(T* gx, AccT<C>* db, AccT<C>* ds, const T* gy, const T* x, const C* mean,
                                           const C* rstd, const T* w, int64_t groups, int64_t G, int64_t D,
                                           int64_t HW) {
  using Acc = AccT<C>;
  using Sums = GradSums<Acc>;
  __shared__ Sums ssum[kThreads];
  auto add = [](Sums p, Sums q) { return Sums{p.b + q.b, p.s + q.s}; };
  const int64_t m = D * HW;
  const bool by_thread = HW < 32;
  for (int64_t r = blockIdx.x; r < groups; r += gridDim.x) {
    const C mf = mean[r], rs = rstd[r];
    const Acc mu = mf;
    const int64_t c0 = (r % G) * D;
    Sums total{0, 0};  // sum over the group's channels of w * (db, ds)
    for (int64_t d = by_thread ? threadIdx.x : 0; d < D; d += by_thread ? blockDim.x : 1) {
      const T *gc = gy + (r * D + d) * HW, *xc = x + (r * D + d) * HW;
      Sums cs{0, 0};
      for (int64_t j = by_thread ? 0 : threadIdx.x; j < HW; j += by_thread ? 1 : blockDim.x) {
        const Acc g = ld(gc[j]);
        cs.b += g;
        cs.s += g * (Acc(ld(xc[j])) - mu);
      }
      if (!by_thread) cs = block_reduce(cs, add, ssum);
      if (db && (by_thread || threadIdx.x == 0)) db[r * D + d] = cs.b, ds[r * D + d] = cs.s;
      const Acc wd = w ? Acc(ld(w[c0 + d])) : Acc(1);
      total.b += wd * cs.b;
      total.s += wd * cs.s;
    }
    if (by_thread) total = block_reduce(total, add, ssum);
    if (!gx) continue;
    const Acc rsd = rs;
    const C kx = static_cast<C>(-rsd * rsd * rsd * total.s / Acc(m)), k0 = static_cast<C>(-rsd * total.b / Acc(m));
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      const int64_t c = c0 + j / HW;
      const C a = w ? rs * ld(w[c]) : rs;
      gx[r * m + j] = static_cast<T>(a * ld(gy[r * m + j]) + kx * (ld(x[r * m + j]) - mf) + k0);
    }
  }
}

// gw[c] = sum over n of rstd * ds, gb[c] = sum over n of db; one thread per channel.
template <typename T, typename C = compute_t<T>>
__global__ void group_norm_backward_channels(T* gw, T* gb, const AccT<C>* db, const AccT<C>* ds, const C* rstd,
                                             int64_t N, int64_t channels, int64_t G, int64_t D) {
  LOCKSTEP_GRID_STRIDE(c, channels) {
    AccT<C> sw = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n) {
      sw += ds[n * channels + c] * rstd[n * G + c / D];
      sb += db[n * channels + c];
    }
    if (gw) gw[c] = static_cast<T>(sw);
    if (gb) gb[c] = static_cast<T>(sb);
  }
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? const_cast<T*>(t.data<T>()) : nullptr;
}

}  // namespace

void CudaBackend::group_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                             const Tensor& bias, int64_t N, int64_t C, int64_t HW, int64_t G, double eps) {
  if (N * G == 0) return;
  OnDevice on(x.device());
  dispatch_any_floating(x.dtype(), "group_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("group_norm_groups", group_norm_groups<T>,
                    static_cast<unsigned>(std::min<int64_t>(N * G, kMaxGrid)), block_for(C / G * HW), on.stream(),
                    y.data<T>(), mean.data<compute_t<T>>(), rstd.data<compute_t<T>>(), x.data<T>(),
                    ptr_or_null<T>(weight), ptr_or_null<T>(bias), N * G, G, C / G, HW, eps);
  });
}

void CudaBackend::group_norm_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t N,
                                      int64_t C, int64_t HW, int64_t G) {
  if (C == 0) return;
  OnDevice on(x.device());
  dispatch_any_floating(x.dtype(), "group_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = AccT<compute_t<T>>;
    const bool params = gw.defined() || gb.defined();
    // [db; ds], each [N, C] (at least one element, so that an empty batch has a valid pointer too).
    std::optional<Scratch> sums;
    if (params) sums.emplace(std::max<int64_t>(2 * N * C, 1) * sizeof(Acc), on.ctx.device());
    Acc* db = params ? sums->as<Acc>() : nullptr;
    if ((gx.defined() || params) && N * G > 0)
      LOCKSTEP_LAUNCH("group_norm_backward_groups", group_norm_backward_groups<T>,
                      static_cast<unsigned>(std::min<int64_t>(N * G, kMaxGrid)), block_for(C / G * HW), on.stream(),
                      ptr_or_null<T>(gx), db, params ? db + N * C : nullptr, gy.data<T>(), x.data<T>(),
                      mean.data<compute_t<T>>(), rstd.data<compute_t<T>>(), ptr_or_null<T>(weight), N * G, G, C / G,
                      HW);
    if (params)
      LOCKSTEP_LAUNCH("group_norm_backward_channels", group_norm_backward_channels<T>, grid_for(C, on.ctx), kThreads,
                      on.stream(), ptr_or_null<T>(gw), ptr_or_null<T>(gb), db, db + N * C, rstd.data<compute_t<T>>(),
                      N, C, G, C / G);
  });
}

}  // namespace lockstep::cuda::detail
