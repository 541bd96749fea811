// log_softmax and its backward along the middle dimension of [outer, n, inner], and the nll_loss pair
// that follows it in cross-entropy. For inner == 1 (softmax over the last dimension, the usual case) one
// block reduces each row; otherwise one thread walks each column. Sums accumulate in double for float
// inputs, as on the CPU.
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_error.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

template <typename T>
using AccT = std::conditional_t<std::is_same_v<T, float>, double, T>;

template <typename T>
__device__ T exp_t(T x) {
  if constexpr (std::is_same_v<T, float>) return expf(x);
  else return exp(x);
}

// NaN-propagating max, so that a NaN row gives NaN everywhere (as on the CPU, where it enters the sum).
template <typename T>
__device__ T max_nan(T a, T b) {
  return isnan(a) ? a : isnan(b) ? b : (a < b ? b : a);
}

constexpr unsigned kMaxGrid = 65535;

// inner == 1: one block per row; y = x - (max + log(sum(exp(x - max)))).
template <typename T>
__global__ void log_softmax_rows(T* out, const T* x, int64_t outer, int64_t n) {
  __shared__ T smax[kThreads];
  __shared__ AccT<T> ssum[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * n;
    T m = -INFINITY;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) m = max_nan(m, xr[k]);
    m = block_reduce(m, [](T a, T b) { return max_nan(a, b); }, smax);
    AccT<T> s = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += exp_t(xr[k] - m);
    s = block_reduce(s, [](AccT<T> a, AccT<T> b) { return a + b; }, ssum);
    const T lse = m + static_cast<T>(log(s));
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) out[o * n + k] = xr[k] - lse;
  }
}

// inner > 1: one thread per (o, i) column, reading with stride inner (coalesced across i).
template <typename T>
__global__ void log_softmax_cols(T* out, const T* x, int64_t outer, int64_t n, int64_t inner) {
  LOCKSTEP_GRID_STRIDE(c, outer * inner) {
    const int64_t o = c / inner, i = c - o * inner;
    const T* xr = x + o * n * inner + i;
    T m = -INFINITY;
    for (int64_t k = 0; k < n; ++k) m = max_nan(m, xr[k * inner]);
    AccT<T> s = 0;
    for (int64_t k = 0; k < n; ++k) s += exp_t(xr[k * inner] - m);
    const T lse = m + static_cast<T>(log(s));
    for (int64_t k = 0; k < n; ++k) out[o * n * inner + i + k * inner] = xr[k * inner] - lse;
  }
}

// grad_in = grad_out - exp(y) * sum(grad_out) along the row.
template <typename T>
__global__ void log_softmax_backward_rows(T* gi, const T* go, const T* y, int64_t outer, int64_t n) {
  __shared__ AccT<T> ssum[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const int64_t base = o * n;
    AccT<T> s = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += go[base + k];
    s = block_reduce(s, [](AccT<T> a, AccT<T> b) { return a + b; }, ssum);
    const T st = static_cast<T>(s);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) gi[base + k] = go[base + k] - exp_t(y[base + k]) * st;
  }
}

template <typename T>
__global__ void log_softmax_backward_cols(T* gi, const T* go, const T* y, int64_t outer, int64_t n, int64_t inner) {
  LOCKSTEP_GRID_STRIDE(c, outer * inner) {
    const int64_t o = c / inner, i = c - o * inner, base = o * n * inner + i;
    AccT<T> s = 0;
    for (int64_t k = 0; k < n; ++k) s += go[base + k * inner];
    const T st = static_cast<T>(s);
    for (int64_t k = 0; k < n; ++k) gi[base + k * inner] = go[base + k * inner] - exp_t(y[base + k * inner]) * st;
  }
}

// out[0] = -scale * sum_i logp[i, target[i]], by one block (n is a batch: thousands, not millions).
template <typename T>
__global__ void nll_loss_kernel(T* out, const T* logp, const int64_t* target, int64_t n, int64_t c, double scale,
                                IndexError* err) {
  __shared__ AccT<T> ssum[kThreads];
  AccT<T> s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = target[i];
    if (index_ok(err, IndexErrorKind::NllTarget, i, t, c)) s += logp[i * c + t];
  }
  s = block_reduce(s, [](AccT<T> a, AccT<T> b) { return a + b; }, ssum);
  if (threadIdx.x == 0) out[0] = static_cast<T>(-static_cast<double>(s) * scale);
}

// grad_logp (zero-filled) [i, target[i]] = -scale * grad_out[0]; grad_out stays on the device.
template <typename T>
__global__ void nll_loss_backward_kernel(T* g, const T* grad_out, const int64_t* target, int64_t n, int64_t c,
                                         double scale, IndexError* err) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    const int64_t t = target[i];
    if (index_ok(err, IndexErrorKind::NllBackwardTarget, i, t, c))
      g[i * c + t] = static_cast<T>(-scale * static_cast<double>(grad_out[0]));
  }
}

unsigned row_grid(int64_t outer) { return static_cast<unsigned>(std::min<int64_t>(outer, kMaxGrid)); }

}  // namespace

void CudaBackend::log_softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) {
  OnDevice on(out.device());
  dispatch_floating(a.dtype(), "log_softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (inner == 1) {
      LOCKSTEP_LAUNCH("log_softmax_rows", log_softmax_rows<T>, row_grid(outer), block_for(n), on.stream(),
                      out.data<T>(), a.data<T>(), outer, n);
    } else {
      LOCKSTEP_LAUNCH("log_softmax_cols", log_softmax_cols<T>, grid_for(outer * inner, on.ctx), kThreads, on.stream(),
                      out.data<T>(), a.data<T>(), outer, n, inner);
    }
  });
}

void CudaBackend::log_softmax_backward(Tensor& gi, const Tensor& go, const Tensor& y, int64_t outer, int64_t n,
                                       int64_t inner) {
  OnDevice on(gi.device());
  dispatch_floating(y.dtype(), "log_softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (inner == 1) {
      LOCKSTEP_LAUNCH("log_softmax_backward_rows", log_softmax_backward_rows<T>, row_grid(outer), block_for(n),
                      on.stream(), gi.data<T>(), go.data<T>(), y.data<T>(), outer, n);
    } else {
      LOCKSTEP_LAUNCH("log_softmax_backward_cols", log_softmax_backward_cols<T>, grid_for(outer * inner, on.ctx),
                      kThreads, on.stream(), gi.data<T>(), go.data<T>(), y.data<T>(), outer, n, inner);
    }
  });
}

void CudaBackend::nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) {
  OnDevice on(out.device());
  const int64_t n = logp.size(0), c = logp.size(1);
  on.ctx.launch_checked([&](IndexError* err) {
    dispatch_floating(logp.dtype(), "nll_loss", [&](auto tag) {
      using T = typename decltype(tag)::type;
      LOCKSTEP_LAUNCH("nll_loss_kernel", nll_loss_kernel<T>, 1, kThreads, on.stream(), out.data<T>(), logp.data<T>(),
                      target.data<int64_t>(), n, c, scale, err);
    });
  });
}

void CudaBackend::nll_loss_backward(Tensor& g, const Tensor& go, const Tensor& target, double scale) {
  OnDevice on(g.device());
  const int64_t n = g.size(0), c = g.size(1);
  on.ctx.launch_checked([&](IndexError* err) {
    dispatch_floating(g.dtype(), "nll_loss_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      LOCKSTEP_LAUNCH("nll_loss_backward_kernel", nll_loss_backward_kernel<T>, grid_for(n, on.ctx), kThreads,
                      on.stream(), g.data<T>(), go.data<T>(), target.data<int64_t>(), n, c, scale, err);
    });
  });
}

}  // namespace lockstep::cuda::detail
