// The CUDA emulator's cuBLAS: GEMM, plain and strided batched (by Eigen, on column-major views), after
// the checks cuBLAS makes (dimensions, leading dimensions, batch count, the handle's device), and that
// every matrix of every batch lies inside one device allocation on the handle's device: a wrong leading
// dimension, batch stride or a swapped operand shows up as an error or a wrong value here, as it would
// on the GPU.
#include <cublas_v2.h>

#include <Eigen/Core>
#include <algorithm>
#include <string>

#include "emu.h"

struct cublasContext {
  int device;
  cudaStream_t stream = nullptr;
};

using namespace lockstep_emu;

namespace {

cublasStatus_t refuse(const std::string& why) {
  note(why);  // cuBLAS has no last-error slot: only the status says it
  return CUBLAS_STATUS_INVALID_VALUE;
}

// Bytes spanned by a column-major rows x cols matrix with leading dimension ld.
size_t span(int rows, int cols, int ld, size_t elem) {
  if (rows == 0 || cols == 0) return 0;
  return (size_t(cols - 1) * ld + rows) * elem;
}

// Whether `batch` matrices of `bytes` each, `stride` elements apart from p (any sign), all lie inside
// device memory of `device`.
bool batch_on_device(const void* p, size_t bytes, long long stride, int batch, size_t elem, int device) {
  if (bytes == 0 || batch == 0) return true;
  const long long reach = static_cast<long long>(batch - 1) * stride * static_cast<long long>(elem);
  const char* lo = static_cast<const char*>(p) + std::min(0LL, reach);
  return device_of(lo, bytes + static_cast<size_t>(reach < 0 ? -reach : reach)) == device;
}

// C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for i < batch, matrix i of X at X + i * strideX;
// cublas?gemm is batch 1.
template <typename T>
cublasStatus_t gemm(const char* name, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const T* alpha, const T* A, int lda, long long strideA, const T* B, int ldb, long long strideB,
                    const T* beta, T* C, int ldc, long long strideC, int batch) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const std::string call = name;
  if (ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return refuse(call + ": CUBLAS_OP_C is not emulated");
  // op(A) is m x k, op(B) is k x n, C is m x n.
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0) return refuse(call + ": negative dimension");
  if (batch < 0) return refuse(call + ": negative batchCount " + std::to_string(batch));
  if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m))
    return refuse(call + ": leading dimension too small (lda " + std::to_string(lda) + " for " +
                  std::to_string(a_rows) + " rows, ldb " + std::to_string(ldb) + " for " + std::to_string(b_rows) +
                  ", ldc " + std::to_string(ldc) + " for " + std::to_string(m) + ")");
  if (current_device() != h->device)
    return refuse(call + ": the handle belongs to device " + std::to_string(h->device) + ", current is " +
                  std::to_string(current_device()));
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const int dev = h->device;
  if (!batch_on_device(C, span(m, n, ldc, sizeof(T)), strideC, batch, sizeof(T), dev) ||
      (k > 0 && (!batch_on_device(A, span(a_rows, a_cols, lda, sizeof(T)), strideA, batch, sizeof(T), dev) ||
                 !batch_on_device(B, span(b_rows, b_cols, ldb, sizeof(T)), strideB, batch, sizeof(T), dev))))
    return refuse(call + ": a matrix is not inside device memory of device " + std::to_string(dev));
  CUstream_st* s = resolve(h->stream);
  if (!s) return CUBLAS_STATUS_EXECUTION_FAILED;
  const T al = *alpha, be = *beta;  // host pointer mode: read at the call
  enqueue(s, [=] {
    // Column-major views with the given leading dimensions; Eigen does the arithmetic.
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
    using Stride = Eigen::OuterStride<>;
    for (int i = 0; i < batch; ++i) {
      Eigen::Map<Mat, 0, Stride> c(C + i * strideC, m, n, Stride(ldc));
      if (k == 0) {
        if (be == T(0))
          c.setZero();
        else
          c *= be;
        continue;
      }
      Eigen::Map<const Mat, 0, Stride> a(A + i * strideA, a_rows, a_cols, Stride(lda)),
          b(B + i * strideB, b_rows, b_cols, Stride(ldb));
      Mat prod = ta == CUBLAS_OP_N ? (tb == CUBLAS_OP_N ? Mat(a * b) : Mat(a * b.transpose()))
                                   : (tb == CUBLAS_OP_N ? Mat(a.transpose() * b) : Mat(a.transpose() * b.transpose()));
      if (be == T(0))
        c = al * prod;  // beta == 0: C is not read (NaN there is ignored), as in cuBLAS
      else
        c = al * prod + be * c;
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (device_count() == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext{current_device()};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  CUstream_st* s = resolve(stream);
  if (!s) return refuse("cublasSetStream: not a live stream");
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;  // TF32 rounding is not emulated
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "cuBLAS error";
  }
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  return gemm("cublasSgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                           double* C, int ldc) {
  return gemm("cublasDgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long strideA,
                                         const float* B, int ldb, long long strideB, const float* beta, float* C,
                                         int ldc, long long strideC, int batchCount) {
  return gemm("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
              strideC, batchCount);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double* alpha, const double* A, int lda, long long strideA,
                                         const double* B, int ldb, long long strideB, const double* beta, double* C,
                                         int ldc, long long strideC, int batchCount) {
  return gemm("cublasDgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
              strideC, batchCount);
}
