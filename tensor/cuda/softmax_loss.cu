// softmax and log_softmax, and their backwards, along the middle dimension of [outer, n, inner], and the
// nll_loss pair that follows log_softmax in cross-entropy. For inner == 1 (softmax over the last
// dimension, the usual case) one block reduces each row; otherwise one thread walks each column
// (coalesced across the columns). Sums accumulate in double for float inputs, as on the CPU.
// bfloat16 and float16 are read and written at 16 bits and computed in float32 (compute_t), each output
// rounded once; T below is the stored type, C the one it computes in.
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_error.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/elementwise_ops.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// The sums' accumulator for compute type C: double for float32 (and 16-bit) inputs.
template <typename C>
using AccT = std::conditional_t<std::is_same_v<C, float>, double, C>;

// One softmax element from x, the row's max m and s = sum(exp(x - m)): the max keeps exp() from
// overflowing. log: x - (m + log(s)); else exp(x - m) / s. A NaN anywhere in the row makes m or s NaN
// and so every output NaN, as on the CPU.
template <typename T, bool kLog>
__device__ T softmax_at(T x, T m, AccT<T> s) {
  if constexpr (kLog) return x - (m + static_cast<T>(math::log(s)));
  else return static_cast<T>(math::exp(x - m) / s);
}

// The backward's row sum: log: sum(g); else sum(g * y). And the input gradient from it.
template <typename T, bool kLog>
__device__ AccT<T> backward_term(T g, T y) {
  if constexpr (kLog) return g;
  else return AccT<T>(g) * AccT<T>(y);
}
template <typename T, bool kLog>
__device__ T backward_at(T g, T y, T sum) {
  if constexpr (kLog) return g - math::exp(y) * sum;
  else return y * (g - sum);
}

constexpr unsigned kMaxGrid = 65535;

// inner == 1: one block per row.
template <typename T, bool kLog>
__global__ void softmax_rows(T* out, const T* x, int64_t outer, int64_t n) {
  using C = compute_t<T>;
  __shared__ C smax[kThreads];
  __shared__ AccT<C> ssum[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * n;
    C m = -INFINITY;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) m = fn::max_nan(m, ld(xr[k]));
    m = block_reduce(m, [](C a, C b) { return fn::max_nan(a, b); }, smax);
    AccT<C> s = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += math::exp(ld(xr[k]) - m);
    s = block_reduce(s, [](AccT<C> a, AccT<C> b) { return a + b; }, ssum);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
      out[o * n + k] = static_cast<T>(softmax_at<C, kLog>(ld(xr[k]), m, s));
  }
}

// inner > 1: one thread per (o, i) column, reading with stride inner.
template <typename T, bool kLog>
__global__ void softmax_cols(T* out, const T* x, int64_t outer, int64_t n, int64_t inner) {
  using C = compute_t<T>;
  LOCKSTEP_GRID_STRIDE(c, outer * inner) {
    const int64_t o = c / inner, i = c - o * inner, base = o * n * inner + i;
    C m = -INFINITY;
    for (int64_t k = 0; k < n; ++k) m = fn::max_nan(m, ld(x[base + k * inner]));
    AccT<C> s = 0;
    for (int64_t k = 0; k < n; ++k) s += math::exp(ld(x[base + k * inner]) - m);
    for (int64_t k = 0; k < n; ++k)
      out[base + k * inner] = static_cast<T>(softmax_at<C, kLog>(ld(x[base + k * inner]), m, s));
  }
}

template <typename T, bool kLog>
__global__ void softmax_backward_rows(T* gi, const T* go, const T* y, int64_t outer, int64_t n) {
  using C = compute_t<T>;
  __shared__ AccT<C> ssum[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const int64_t base = o * n;
    AccT<C> s = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += backward_term<C, kLog>(ld(go[base + k]), ld(y[base + k]));
    s = block_reduce(s, [](AccT<C> a, AccT<C> b) { return a + b; }, ssum);
    const C st = static_cast<C>(s);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
      gi[base + k] = static_cast<T>(backward_at<C, kLog>(ld(go[base + k]), ld(y[base + k]), st));
  }
}

template <typename T, bool kLog>
__global__ void softmax_backward_cols(T* gi, const T* go, const T* y, int64_t outer, int64_t n, int64_t inner) {
  using C = compute_t<T>;
  LOCKSTEP_GRID_STRIDE(c, outer * inner) {
    const int64_t o = c / inner, i = c - o * inner, base = o * n * inner + i;
    AccT<C> s = 0;
    for (int64_t k = 0; k < n; ++k) s += backward_term<C, kLog>(ld(go[base + k * inner]), ld(y[base + k * inner]));
    const C st = static_cast<C>(s);
    for (int64_t k = 0; k < n; ++k)
      gi[base + k * inner] = static_cast<T>(backward_at<C, kLog>(ld(go[base + k * inner]), ld(y[base + k * inner]), st));
  }
}

// out[0] = -scale * sum_i logp[i, target[i]], by one block (n is a batch: thousands, not millions).
template <typename T>
__global__ void nll_loss_kernel(T* out, const T* logp, const int64_t* target, int64_t n, int64_t c, double scale,
                                IndexError* err) {
  using Acc = AccT<compute_t<T>>;
  __shared__ Acc ssum[kThreads];
  Acc s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = target[i];
    if (index_ok(err, IndexErrorKind::NllTarget, i, t, c)) s += ld(logp[i * c + t]);
  }
  s = block_reduce(s, [](Acc a, Acc b) { return a + b; }, ssum);
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

// Calls launch(std::bool_constant<log>).
template <typename Launch>
void with_log(bool log, Launch&& launch) {
  if (log) launch(std::true_type{});
  else launch(std::false_type{});
}

void check_dims(const char* op, const Tensor& a, int64_t outer, int64_t n, int64_t inner) {
  LOCKSTEP_CHECK(outer >= 0 && n >= 0 && inner >= 0 && outer * n * inner == a.numel(), op, ": [outer, n, inner] = [",
                 outer, ", ", n, ", ", inner, "] does not match the tensor's ", a.numel(), " elements");
}

}  // namespace

void CudaBackend::softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_dims(op, a, outer, n, inner);
  if (a.numel() == 0) return;
  OnDevice on(out.device());
  dispatch_any_floating(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_log(log, [&](auto log_c) {
      constexpr bool kLog = decltype(log_c)::value;
      if (inner == 1) {
        LOCKSTEP_LAUNCH("softmax_rows", softmax_rows<T, kLog>, row_grid(outer), block_for(n), on.stream(),
                        out.data<T>(), a.data<T>(), outer, n);
      } else {
        LOCKSTEP_LAUNCH("softmax_cols", softmax_cols<T, kLog>, grid_for(outer * inner, on.ctx), kThreads, on.stream(),
                        out.data<T>(), a.data<T>(), outer, n, inner);
      }
    });
  });
}

void CudaBackend::softmax_backward(Tensor& gi, const Tensor& go, const Tensor& y, int64_t outer, int64_t n,
                                   int64_t inner, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_dims(op, y, outer, n, inner);
  if (y.numel() == 0) return;
  OnDevice on(gi.device());
  dispatch_any_floating(y.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_log(log, [&](auto log_c) {
      constexpr bool kLog = decltype(log_c)::value;
      if (inner == 1) {
        LOCKSTEP_LAUNCH("softmax_backward_rows", softmax_backward_rows<T, kLog>, row_grid(outer), block_for(n),
                        on.stream(), gi.data<T>(), go.data<T>(), y.data<T>(), outer, n);
      } else {
        LOCKSTEP_LAUNCH("softmax_backward_cols", softmax_backward_cols<T, kLog>, grid_for(outer * inner, on.ctx),
                        kThreads, on.stream(), gi.data<T>(), go.data<T>(), y.data<T>(), outer, n, inner);
      }
    });
  });
}

void CudaBackend::nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) {
  OnDevice on(out.device());
  const int64_t n = logp.size(0), c = logp.size(1);
  on.ctx.launch_checked([&](IndexError* err) {
    dispatch_any_floating(logp.dtype(), "nll_loss", [&](auto tag) {
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
    dispatch_any_floating(g.dtype(), "nll_loss_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      LOCKSTEP_LAUNCH("nll_loss_backward_kernel", nll_loss_backward_kernel<T>, grid_for(n, on.ctx), kThreads,
                      on.stream(), g.data<T>(), go.data<T>(), target.data<int64_t>(), n, c, scale, err);
    });
  });
}

}  // namespace lockstep::cuda::detail
