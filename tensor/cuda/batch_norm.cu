// Batch norm's four kernels over x [N, C, inner] (tensor/backend.h states the rules). The reductions
// take one block per channel, which walks the channel's N planes and sums in double (the statistics
// are float64, as on the CPU); the elementwise passes take one block per (n, c) plane, which works out
// the channel's constants once and then runs along the contiguous plane. bfloat16 and float16 x, grad_y
// and outputs are read and written at 16 bits and computed in float32 (C = compute_t<T>), with the
// weight and bias in float32 (C), as PyTorch's CUDA kernels take a float32 weight beside a 16-bit input.
#include <algorithm>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

constexpr int64_t kMaxGrid = 65535;

// sums[c] = sum f(x), sums[C + c] = sum g(x) over channel c; f and g take (gy, x) where gy is given.
template <typename T, bool kBackward>
__global__ void channel_sums(double* sums, const T* gy, const T* x, const double* mean, int64_t N, int64_t C,
                             int64_t inner) {
  __shared__ double smem[kThreads];
  auto add = [](double p, double q) { return p + q; };
  const int64_t per_channel = N * inner;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const double m = kBackward ? mean[c] : 0.0;
    double s = 0, q = 0;
    for (int64_t i = threadIdx.x; i < per_channel; i += blockDim.x) {
      const int64_t at = ((i / inner) * C + c) * inner + i % inner;
      const double v = static_cast<double>(x[at]);
      if (kBackward) {
        const double g = static_cast<double>(gy[at]);
        s += g;
        q += g * (v - m);
      } else {
        s += v;
        q += v * v;
      }
    }
    s = block_reduce(s, add, smem);
    q = block_reduce(q, add, smem);
    if (threadIdx.x == 0) {
      sums[c] = s;
      sums[C + c] = q;
    }
  }
}

template <typename T, typename W = compute_t<T>>
__global__ void batch_norm_elemt_planes(T* y, const T* x, const double* mean, const double* invstd, const W* w,
                                        const W* b, int64_t planes, int64_t C, int64_t inner) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const int64_t c = p % C;
    const double a = invstd[c] * (w ? static_cast<double>(w[c]) : 1.0);
    const W at = static_cast<W>(a), bt = static_cast<W>((b ? static_cast<double>(b[c]) : 0.0) - mean[c] * a);
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x)
      y[p * inner + j] = static_cast<T>(ld(x[p * inner + j]) * at + bt);
  }
}

template <typename T, typename W = compute_t<T>>
__global__ void batch_norm_backward_elemt_planes(T* gx, const T* gy, const T* x, const double* mean,
                                                 const double* invstd, const W* w, const double* sums, double count,
                                                 int64_t planes, int64_t C, int64_t inner) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const int64_t c = p % C;
    const double k = invstd[c] * (w ? static_cast<double>(w[c]) : 1.0);
    const double mdy = sums ? sums[c] / count : 0.0;
    const double proj = sums ? invstd[c] * invstd[c] * sums[C + c] / count : 0.0;
    const W kt = static_cast<W>(k), c1 = static_cast<W>(-k * proj), c0 = static_cast<W>(k * (proj * mean[c] - mdy));
    for (int64_t j = threadIdx.x; j < inner; j += blockDim.x) {
      const int64_t at = p * inner + j;
      gx[at] = static_cast<T>(ld(gy[at]) * kt + ld(x[at]) * c1 + c0);
    }
  }
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

unsigned blocks(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>(n, 1, kMaxGrid)); }

}  // namespace

void CudaBackend::batch_norm_stats(Tensor& sums, const Tensor& x, int64_t N, int64_t C, int64_t inner) {
  if (C == 0) return;
  OnDevice on(x.device());
  dispatch_any_floating(x.dtype(), "batch_norm_stats", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("batch_norm_stats", channel_sums<T, false>, blocks(C), kThreads, on.stream(), sums.data<double>(),
                    static_cast<const T*>(nullptr), x.data<T>(), static_cast<const double*>(nullptr), N, C, inner);
  });
}

void CudaBackend::batch_norm_elemt(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                   const Tensor& weight, const Tensor& bias, int64_t N, int64_t C, int64_t inner) {
  if (N * C * inner == 0) return;
  OnDevice on(x.device());
  dispatch_any_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("batch_norm_elemt", batch_norm_elemt_planes<T>, blocks(N * C), block_for(inner), on.stream(),
                    y.data<T>(), x.data<T>(), mean.data<double>(), invstd.data<double>(),
                    ptr_or_null<compute_t<T>>(weight), ptr_or_null<compute_t<T>>(bias), N * C, C, inner);
  });
}

void CudaBackend::batch_norm_backward_reduce(Tensor& sums, const Tensor& gy, const Tensor& x, const Tensor& mean,
                                             int64_t N, int64_t C, int64_t inner) {
  if (C == 0) return;
  OnDevice on(x.device());
  dispatch_any_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("batch_norm_backward_reduce", channel_sums<T, true>, blocks(C), kThreads, on.stream(),
                    sums.data<double>(), gy.data<T>(), x.data<T>(), mean.data<double>(), N, C, inner);
  });
}

void CudaBackend::batch_norm_backward_elemt(Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& mean,
                                            const Tensor& invstd, const Tensor& weight, const Tensor& sums,
                                            double count, int64_t N, int64_t C, int64_t inner) {
  if (N * C * inner == 0) return;
  OnDevice on(x.device());
  dispatch_any_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("batch_norm_backward_elemt", batch_norm_backward_elemt_planes<T>, blocks(N * C),
                    block_for(inner), on.stream(), gx.data<T>(), gy.data<T>(), x.data<T>(), mean.data<double>(),
                    invstd.data<double>(), ptr_or_null<compute_t<T>>(weight), ptr_or_null<double>(sums), count, N * C, C, inner);
  });
}

}  // namespace lockstep::cuda::detail
