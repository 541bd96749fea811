// LayerNorm over the last dimension and its backward (tensor/backend.h states the rule). One block
// per row reduces it (sums in double for float inputs, as on the CPU); the weight and bias gradients,
// sums over the rows, take one thread per column (coalesced across the columns). bfloat16 and float16
// are read and written at 16 bits and computed in float32, with float32 mean and rstd.
#include <cmath>
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

// x, w, b, y of T; mean and rstd of C = compute_t<T> (float32 for a 16-bit x, as on the CPU).
template <typename T, typename C = compute_t<T>>
__global__ void layer_norm_rows(T* y, C* mean, C* rstd, const T* x, const T* w, const T* b, int64_t rows, int64_t n,
                                double eps) {
  using Acc = AccT<C>;
  __shared__ Acc ssum[kThreads];
  auto add = [](Acc p, Acc q) { return p + q; };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    Acc s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += ld(xr[j]);
    const Acc mu = block_reduce(s, add, ssum) / Acc(n);
    Acc v = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) v += (ld(xr[j]) - mu) * (ld(xr[j]) - mu);
    const Acc var = block_reduce(v, add, ssum) / Acc(n);
    const C m = static_cast<C>(mu), rs = static_cast<C>(1 / sqrt(static_cast<double>(var) + eps));
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      C o = (ld(xr[j]) - m) * rs;
      if (w) o = o * ld(w[j]);
      if (b) o = o + ld(b[j]);
      y[r * n + j] = static_cast<T>(o);
    }
  }
}

template <typename T, typename C = compute_t<T>>
__global__ void layer_norm_backward_rows(T* gx, const T* gy, const T* x, const C* mean, const C* rstd, const T* w,
                                         int64_t rows, int64_t n) {
  using Acc = AccT<C>;
  __shared__ Acc ssum[kThreads];
  auto add = [](Acc p, Acc q) { return p + q; };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n, *gr = gy + r * n;
    const C m = mean[r], rs = rstd[r];
    Acc sa = 0, sc = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C gh = w ? ld(gr[j]) * ld(w[j]) : ld(gr[j]);
      sa += gh;
      sc += gh * ((ld(xr[j]) - m) * rs);
    }
    const C a = static_cast<C>(block_reduce(sa, add, ssum) / Acc(n));
    const C c = static_cast<C>(block_reduce(sc, add, ssum) / Acc(n));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C gh = w ? ld(gr[j]) * ld(w[j]) : ld(gr[j]);
      gx[r * n + j] = static_cast<T>(rs * (gh - a - (ld(xr[j]) - m) * rs * c));
    }
  }
}

template <typename T, typename C = compute_t<T>>
__global__ void layer_norm_backward_cols(T* gw, T* gb, const T* gy, const T* x, const C* mean, const C* rstd,
                                         int64_t rows, int64_t n) {
  LOCKSTEP_GRID_STRIDE(j, n) {
    AccT<C> sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const C g = ld(gy[r * n + j]);
      sw += g * ((ld(x[r * n + j]) - mean[r]) * rstd[r]);
      sb += g;
    }
    if (gw) gw[j] = static_cast<T>(sw);
    if (gb) gb[j] = static_cast<T>(sb);
  }
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? const_cast<T*>(t.data<T>()) : nullptr;
}

}  // namespace

void CudaBackend::layer_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                             const Tensor& bias, int64_t rows, int64_t n, double eps) {
  if (rows == 0) return;
  OnDevice on(x.device());
  dispatch_any_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("layer_norm_rows", layer_norm_rows<T>, static_cast<unsigned>(std::min<int64_t>(rows, kMaxGrid)),
                    block_for(n), on.stream(), y.data<T>(), mean.data<compute_t<T>>(), rstd.data<compute_t<T>>(), x.data<T>(),
                    ptr_or_null<T>(weight), ptr_or_null<T>(bias), rows, n, eps);
  });
}

void CudaBackend::layer_norm_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t rows,
                                      int64_t n) {
  OnDevice on(x.device());
  dispatch_any_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (gx.defined() && rows > 0)
      LOCKSTEP_LAUNCH("layer_norm_backward_rows", layer_norm_backward_rows<T>,
                      static_cast<unsigned>(std::min<int64_t>(rows, kMaxGrid)), block_for(n), on.stream(),
                      gx.data<T>(), gy.data<T>(), x.data<T>(), mean.data<compute_t<T>>(), rstd.data<compute_t<T>>(), ptr_or_null<T>(weight),
                      rows, n);
    if ((gw.defined() || gb.defined()) && n > 0)
      LOCKSTEP_LAUNCH("layer_norm_backward_cols", layer_norm_backward_cols<T>, grid_for(n, on.ctx), kThreads,
                      on.stream(), ptr_or_null<T>(gw), ptr_or_null<T>(gb), gy.data<T>(), x.data<T>(),
                      mean.data<compute_t<T>>(), rstd.data<compute_t<T>>(), rows, n);
  });
}

}  // namespace lockstep::cuda::detail
