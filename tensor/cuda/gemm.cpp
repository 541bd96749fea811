// CudaBackend::gemm through cuBLAS (one handle per device, on the device's stream), and the TF32 switch.
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <mutex>

#include "common/check.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cublas_api.h"
#include "tensor/cuda/cuda.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/tensor.h"

#define LOCKSTEP_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                                  \
    cublasStatus_t lockstep_st_ = (call);                                                               \
    if (lockstep_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      ::lockstep::fail("cuBLAS error: ", #call, " failed at ", __FILE__, ":", __LINE__, ": ",           \
                       api().cublasGetStatusString(lockstep_st_), " (", api().cublasGetStatusName(lockstep_st_), ")"); \
  } while (0)

namespace lockstep::cuda {
namespace {

const detail::CublasApi& api() { return detail::cublas_api(); }

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
    LOCKSTEP_CUBLAS_CHECK(api().cublasCreate(&b.handle));
    LOCKSTEP_CUBLAS_CHECK(api().cublasSetStream(b.handle, ctx.stream()));
  }
  return b;
}

}  // namespace

void set_allow_tf32(bool allow) { tf32 = allow; }
bool allow_tf32() { return tf32; }

namespace detail {
namespace {

// cuBLAS takes int dimensions; lockstep's are int64.
int to_int(int64_t v, const char* what, const GemmArgs& g) {
  LOCKSTEP_CHECK(v >= 0 && v <= INT_MAX, "matmul: ", what, " = ", v, " is out of cuBLAS's range [0, 2^31 - 1] (batch ",
                 g.batch, ", m ", g.m, ", n ", g.n, ", k ", g.k, ")");
  return static_cast<int>(v);
}

// The leading dimension cuBLAS gets for a row-major rows x cols matrix stored with row stride ld. A
// matrix of one row may carry any ld (a size-1 dimension's stride means nothing), but cuBLAS still
// checks ld >= cols: such an ld is raised to cols. Otherwise rows must not overlap.
int leading_dim(int64_t rows, int64_t cols, int64_t ld, const char* name, const GemmArgs& g) {
  if (rows <= 1) ld = std::max<int64_t>({ld, cols, 1});
  LOCKSTEP_CHECK(ld >= std::max<int64_t>(cols, 1), "matmul: ", name, " = ", ld, " is below the row length ", cols,
                 " of a ", rows, " x ", cols, " operand (rows would overlap); make it contiguous first");
  return to_int(ld, name, g);
}

}  // namespace

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major matrix read as
// column-major is its transpose: so cuBLAS gets B before A, the same transpose flags, m and n swapped,
// and each matrix's row stride as its leading dimension. C: [m, n], op(A): [m, k], op(B): [k, n]; the
// batch strides go with their matrices (0: one matrix shared by every product).
void CudaBackend::gemm(Tensor& out, const Tensor& a, const Tensor& b, const GemmArgs& g) {
  LOCKSTEP_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype(), "matmul: operands of dtypes ", a.dtype(), ", ",
                 b.dtype(), " and output ", out.dtype(), " reached the GEMM; they must match");
  LOCKSTEP_CHECK(g.batch >= 0 && g.m >= 0 && g.n >= 0 && g.k >= 0, "matmul: negative GEMM size (batch ", g.batch,
                 ", m ", g.m, ", n ", g.n, ", k ", g.k, ")");
  LOCKSTEP_CHECK(g.batch_stride_a >= 0 && g.batch_stride_b >= 0 && g.batch_stride_c >= 0,
                 "matmul: negative batch stride (a ", g.batch_stride_a, ", b ", g.batch_stride_b, ", c ",
                 g.batch_stride_c, ")");
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  // Products run concurrently: two writing the same elements of C would race.
  LOCKSTEP_CHECK(g.batch == 1 || g.batch_stride_c >= (g.m - 1) * std::max(g.ldc, g.n) + g.n,
                 "matmul: output matrices overlap (batch ", g.batch, ", batch_stride_c ", g.batch_stride_c, ", m ", g.m,
                 ", n ", g.n, ", ldc ", g.ldc, ")");
  if (small_gemm(out, a, b, g)) return;
  // For cuBLAS, the bias first (C = beta C + bias), then the product added onto it.
  if (g.bias) return gemm(out, a, b, gemm_bias_first(out, g));
  if (g.k == 0) {  // nothing to multiply: out = beta * out (cuBLAS may refuse a leading dimension of 0)
    const StridedPlan p = gemm_c_plan(g);
    if (g.beta == 0) fill(p, out, 0.0);
    else if (g.beta != 1) binary_scalar(BinaryOp::Mul, p, out, out, g.beta, false);
    return;
  }
  const int m = to_int(g.n, "n", g), n = to_int(g.m, "m", g), k = to_int(g.k, "k", g);
  const int batch = to_int(g.batch, "batch", g);
  // Stored shapes: A is [m, k] ([k, m] transposed), B [k, n] ([n, k]), C [m, n].
  const int lda = leading_dim(g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, "lda", g);
  const int ldb = leading_dim(g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, "ldb", g);
  const int ldc = leading_dim(g.m, g.n, g.ldc, "ldc", g);
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const long long sa = g.batch_stride_a, sb = g.batch_stride_b, sc = g.batch_stride_c;
  OnDevice on(out.device());
  Blas& h = blas(on.ctx);
  std::lock_guard<std::mutex> lock(h.mu);
  if (a.dtype() == kFloat32) {
    LOCKSTEP_CUBLAS_CHECK(
        api().cublasSetMathMode(h.handle, allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    const float al = static_cast<float>(g.alpha), be = static_cast<float>(g.beta);
    const float *pa = a.data<float>(), *pb = b.data<float>();
    float* pc = out.data<float>();
    if (batch == 1)
      LOCKSTEP_CUBLAS_CHECK(api().cublasSgemm(h.handle, op_b, op_a, m, n, k, &al, pb, ldb, pa, lda, &be, pc, ldc));
    else
      LOCKSTEP_CUBLAS_CHECK(api().cublasSgemmStridedBatched(h.handle, op_b, op_a, m, n, k, &al, pb, ldb, sb, pa, lda, sa,
                                                      &be, pc, ldc, sc, batch));
  } else if (a.dtype() == kFloat64) {
    const double *pa = a.data<double>(), *pb = b.data<double>();
    double* pc = out.data<double>();
    if (batch == 1)
      LOCKSTEP_CUBLAS_CHECK(api().cublasDgemm(h.handle, op_b, op_a, m, n, k, &g.alpha, pb, ldb, pa, lda, &g.beta, pc, ldc));
    else
      LOCKSTEP_CUBLAS_CHECK(api().cublasDgemmStridedBatched(h.handle, op_b, op_a, m, n, k, &g.alpha, pb, ldb, sb, pa, lda,
                                                      sa, &g.beta, pc, ldc, sc, batch));
  } else if (a.dtype() == kBFloat16 || a.dtype() == kFloat16) {
    // 16-bit operands on the tensor cores with float32 accumulation (autocast's products); the result
    // is rounded once into C.
    const cudaDataType t = a.dtype() == kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
    const float al = static_cast<float>(g.alpha), be = static_cast<float>(g.beta);
    const void *pa = a.data_ptr(), *pb = b.data_ptr();
    void* pc = out.data_ptr();
    if (batch == 1)
      LOCKSTEP_CUBLAS_CHECK(api().cublasGemmEx(h.handle, op_b, op_a, m, n, k, &al, pb, t, ldb, pa, t, lda, &be, pc, t, ldc,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
      LOCKSTEP_CUBLAS_CHECK(api().cublasGemmStridedBatchedEx(h.handle, op_b, op_a, m, n, k, &al, pb, t, ldb, sb, pa, t, lda,
                                                       sa, &be, pc, t, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                                       CUBLAS_GEMM_DEFAULT));
  } else {
    fail("matmul: expected float32, float64, bfloat16 or float16 operands, got ", a.dtype());
  }
}

}  // namespace detail
}  // namespace lockstep::cuda
