// Small matrix products in one kernel of our own: a thread per element of C, its dot product over k in
// registers, then alpha, beta and the bias applied as it is stored. For products this small the GPU's
// work is negligible and the cost is the host's: a cuBLAS call measured 8.5-11 µs of host time on an
// H200 where one of our launches took about 5 (BENCHMARKS.md), and Linear's bias would be a second launch.
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// At most this many multiply-adds in all, and this long a dot product per thread (a thread runs its
// k serially: a long k with few outputs belongs to cuBLAS, which splits k).
constexpr int64_t kSmallGemmMacs = int64_t{1} << 20;
constexpr int64_t kSmallGemmMaxK = 1024;

// op(A)[i, p] = a[i * a_row + p * a_col], op(B)[p, j] = b[p * b_row + j * b_col]: transposes as strides.
struct SmallGemm {
  int64_t m, n, k, total;
  int64_t a_row, a_col, b_row, b_col, ldc;
  int64_t sa, sb, sc;  // batch strides
};

template <typename T>
__global__ void small_gemm_kernel(T* c, const T* a, const T* b, const T* bias, SmallGemm g, T alpha, T beta) {
  LOCKSTEP_GRID_STRIDE(idx, g.total) {
    const int64_t j = idx % g.n, row = idx / g.n, i = row % g.m, batch = row / g.m;
    const T* ai = a + batch * g.sa + i * g.a_row;
    const T* bj = b + batch * g.sb + j * g.b_col;
    T acc = 0;
    for (int64_t p = 0; p < g.k; ++p) acc += ai[p * g.a_col] * bj[p * g.b_row];
    T* cij = c + batch * g.sc + i * g.ldc + j;
    T v = alpha * acc;
    if (beta != T(0)) v += beta * *cij;  // beta 0: C is not read (it may hold NaN)
    if (bias) v += bias[j];
    *cij = v;
  }
}

}  // namespace

bool small_gemm(Tensor& out, const Tensor& a, const Tensor& b, const GemmArgs& g) {
  const int64_t outputs = g.batch * g.m * g.n;
  if (g.k > kSmallGemmMaxK || outputs * std::max<int64_t>(g.k, 1) > kSmallGemmMacs) return false;
  if (a.dtype() != kFloat32 && a.dtype() != kFloat64) return false;
  const SmallGemm s{g.m,
                    g.n,
                    g.k,
                    outputs,
                    g.trans_a ? 1 : g.lda,
                    g.trans_a ? g.lda : 1,
                    g.trans_b ? 1 : g.ldb,
                    g.trans_b ? g.ldb : 1,
                    g.ldc,
                    g.batch_stride_a,
                    g.batch_stride_b,
                    g.batch_stride_c};
  OnDevice on(out.device());
  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* bias = g.bias ? g.bias->data<T>() : nullptr;
    LOCKSTEP_LAUNCH("small_gemm_kernel", small_gemm_kernel<T>, grid_for(outputs, on.ctx, block_for(outputs)),
                    block_for(outputs), on.stream(), out.data<T>(), a.data<T>(), b.data<T>(), bias, s,
                    static_cast<T>(g.alpha), static_cast<T>(g.beta));
  });
  return true;
}

}  // namespace lockstep::cuda::detail
