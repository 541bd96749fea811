// CudaBackend::gemm through cuBLAS (one handle per device, on the device's stream), and the TF32 switch.
#include <cublas_v2.h>

#include <array>
#include <atomic>
#include <climits>
#include <mutex>

#include "common/check.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/tensor.h"

#define LOCKSTEP_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                                  \
    cublasStatus_t lockstep_st_ = (call);                                                               \
    if (lockstep_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      ::lockstep::fail("cuBLAS error: ", #call, " failed at ", __FILE__, ":", __LINE__, ": ",           \
                       cublasGetStatusString(lockstep_st_), " (", cublasGetStatusName(lockstep_st_), ")"); \
  } while (0)

namespace lockstep::cuda {
namespace {

std::atomic<bool> tf32{false};

// A cuBLAS handle is not safe to use from two threads at once: each device's handle comes with a lock.
struct Blas {
  std::mutex mu;
  cublasHandle_t handle = nullptr;
};

Blas& blas(detail::DeviceContext& ctx) {
  static auto* handles = new std::array<Blas, 64>;  // never destroyed: gemms may run during exit
  Blas& b = (*handles)[ctx.device()];
  std::lock_guard<std::mutex> lock(b.mu);
  if (!b.handle) {
    LOCKSTEP_CUBLAS_CHECK(cublasCreate(&b.handle));
    LOCKSTEP_CUBLAS_CHECK(cublasSetStream(b.handle, ctx.stream()));
  }
  return b;
}

}  // namespace

void set_allow_tf32(bool allow) { tf32 = allow; }
bool allow_tf32() { return tf32; }

namespace detail {

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major matrix read as
// column-major is its transpose: so cuBLAS gets B before A, the same transpose flags, m and n swapped,
// and each matrix's row length as its leading dimension. C: [M, N], op(A): [M, K], op(B): [K, N].
void CudaBackend::gemm(Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, double alpha, double beta) {
  const int64_t M = out.size(0), N = out.size(1), K = ta ? a.size(0) : a.size(1);
  if (K == 0) {  // nothing to multiply: out = beta * out (cuBLAS rejects a leading dimension of 0)
    if (beta == 0) fill(out, 0.0);
    else if (beta != 1) binary_scalar(BinaryOp::Mul, out, out, beta, false);
    return;
  }
  LOCKSTEP_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && a.size(1) <= INT_MAX && b.size(1) <= INT_MAX,
                 "matmul: ", a.shape(), " x ", b.shape(), " is too large for cuBLAS (dimensions above 2^31 - 1)");
  OnDevice on(out.device());
  Blas& h = blas(on.ctx);
  std::lock_guard<std::mutex> lock(h.mu);
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int lda = static_cast<int>(a.size(1)), ldb = static_cast<int>(b.size(1)), ldc = static_cast<int>(N);
  if (a.dtype() == kFloat32) {
    LOCKSTEP_CUBLAS_CHECK(
        cublasSetMathMode(h.handle, allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
    LOCKSTEP_CUBLAS_CHECK(cublasSgemm(h.handle, op_b, op_a, m, n, k, &al, b.data<float>(), ldb, a.data<float>(), lda,
                                      &be, out.data<float>(), ldc));
  } else if (a.dtype() == kFloat64) {
    LOCKSTEP_CUBLAS_CHECK(cublasDgemm(h.handle, op_b, op_a, m, n, k, &alpha, b.data<double>(), ldb,
                                      a.data<double>(), lda, &beta, out.data<double>(), ldc));
  } else {
    fail("matmul: expected a floating-point tensor, got ", a.dtype());
  }
}

}  // namespace detail
}  // namespace lockstep::cuda
