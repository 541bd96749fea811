// Max pooling (tensor/backend.h states the rule): one thread per output element walks its window.
// bfloat16 and float16 are compared in float32 and the maximum copied as it is.
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

template <typename T>
__global__ void max_pool2d_kernel(T* out, int64_t* indices, const T* x, MaxPool2dArgs a, int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, n) {
    const int64_t ow = e % a.OW, oh = (e / a.OW) % a.OH, p = e / (a.OW * a.OH);
    const int64_t base = p * a.H * a.W, first = base + oh * a.sh * a.W + ow * a.sw;
    int64_t at = first;
    for (int64_t i = 0; i < a.kh; ++i)
      for (int64_t j = 0; j < a.kw; ++j) {
        const int64_t q = first + i * a.dh * a.W + j * a.dw;
        const compute_t<T> v = ld(x[q]), best = ld(x[at]);
        if (!fn::is_nan(best) && (fn::is_nan(v) || v > best)) at = q;  // first NaN, else first maximum
      }
    out[e] = x[at];
    indices[e] = at;
  }
}

}  // namespace

void CudaBackend::max_pool2d(Tensor& out, Tensor& indices, const Tensor& x, const MaxPool2dArgs& args) {
  OnDevice on(x.device());
  const int64_t n = out.numel();
  dispatch_any_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("max_pool2d", max_pool2d_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), out.data<T>(),
                    indices.data<int64_t>(), x.data<T>(), args, n);
  });
}

}  // namespace lockstep::cuda::detail
