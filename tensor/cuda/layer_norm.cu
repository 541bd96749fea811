// LayerNorm over the last dimension and its backward (tensor/backend.h states the rule). One block
// per row reduces it (sums in double for float inputs, as on the CPU); the weight and bias gradients,
// sums over the rows, take one thread per column (coalesced across the columns).
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

template <typename T>
using AccT = std::conditional_t<std::is_same_v<T, float>, double, T>;

constexpr unsigned kMaxGrid = 65535;

template <typename T>
__global__ void layer_norm_rows(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows, int64_t n,
                                double eps) {
  __shared__ AccT<T> ssum[kThreads];
  auto add = [](AccT<T> p, AccT<T> q) { return p + q; };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    AccT<T> s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += xr[j];
    const AccT<T> mu = block_reduce(s, add, ssum) / AccT<T>(n);
    AccT<T> v = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) v += (xr[j] - mu) * (xr[j] - mu);
    const AccT<T> var = block_reduce(v, add, ssum) / AccT<T>(n);
    const T m = static_cast<T>(mu), rs = static_cast<T>(1 / sqrt(static_cast<double>(var) + eps));
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      T o = (xr[j] - m) * rs;
      if (w) o = o * w[j];
      if (b) o = o + b[j];
      y[r * n + j] = o;
    }
  }
}

template <typename T>
__global__ void layer_norm_backward_rows(T* gx, const T* gy, const T* x, const T* mean, const T* rstd, const T* w,
                                         int64_t rows, int64_t n) {
  __shared__ AccT<T> ssum[kThreads];
  auto add = [](AccT<T> p, AccT<T> q) { return p + q; };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n, *gr = gy + r * n;
    const T m = mean[r], rs = rstd[r];
    AccT<T> sa = 0, sc = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const T gh = w ? gr[j] * w[j] : gr[j];
      sa += gh;
      sc += gh * ((xr[j] - m) * rs);
    }
    const T a = static_cast<T>(block_reduce(sa, add, ssum) / AccT<T>(n));
    const T c = static_cast<T>(block_reduce(sc, add, ssum) / AccT<T>(n));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const T gh = w ? gr[j] * w[j] : gr[j];
      gx[r * n + j] = rs * (gh - a - (xr[j] - m) * rs * c);
    }
  }
}

template <typename T>
__global__ void layer_norm_backward_cols(T* gw, T* gb, const T* gy, const T* x, const T* mean, const T* rstd,
                                         int64_t rows, int64_t n) {
  LOCKSTEP_GRID_STRIDE(j, n) {
    AccT<T> sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T g = gy[r * n + j];
      sw += g * ((x[r * n + j] - mean[r]) * rstd[r]);
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
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("layer_norm_rows", layer_norm_rows<T>, static_cast<unsigned>(std::min<int64_t>(rows, kMaxGrid)),
                    block_for(n), on.stream(), y.data<T>(), mean.data<T>(), rstd.data<T>(), x.data<T>(),
                    ptr_or_null<T>(weight), ptr_or_null<T>(bias), rows, n, eps);
  });
}

void CudaBackend::layer_norm_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t rows,
                                      int64_t n) {
  OnDevice on(x.device());
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (gx.defined() && rows > 0)
      LOCKSTEP_LAUNCH("layer_norm_backward_rows", layer_norm_backward_rows<T>,
                      static_cast<unsigned>(std::min<int64_t>(rows, kMaxGrid)), block_for(n), on.stream(),
                      gx.data<T>(), gy.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(), ptr_or_null<T>(weight),
                      rows, n);
    if ((gw.defined() || gb.defined()) && n > 0)
      LOCKSTEP_LAUNCH("layer_norm_backward_cols", layer_norm_backward_cols<T>, grid_for(n, on.ctx), kThreads,
                      on.stream(), ptr_or_null<T>(gw), ptr_or_null<T>(gb), gy.data<T>(), x.data<T>(), mean.data<T>(),
                      rstd.data<T>(), rows, n);
  });
}

}  // namespace lockstep::cuda::detail
