// The CUDA emulator's cuBLAS: GEMM (by Eigen, on column-major views), after the checks cuBLAS makes
// (dimensions, leading dimensions, the handle's device), and that every matrix lies inside one device
// allocation on the handle's device: a wrong leading dimension or a swapped operand shows up as an error
// or a wrong value here, as it would on the GPU.
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

template <typename T>
cublasStatus_t gemm(const char* name, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const T* alpha, const T* A, int lda, const T* B, int ldb, const T* beta, T* C, int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const std::string call = name;
  if (ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return refuse(call + ": CUBLAS_OP_C is not emulated");
  // op(A) is m x k, op(B) is k x n, C is m x n.
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0) return refuse(call + ": negative dimension");
  if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m))
    return refuse(call + ": leading dimension too small (lda " + std::to_string(lda) + " for " +
                  std::to_string(a_rows) + " rows, ldb " + std::to_string(ldb) + " for " + std::to_string(b_rows) +
                  ", ldc " + std::to_string(ldc) + " for " + std::to_string(m) + ")");
  if (current_device() != h->device)
    return refuse(call + ": the handle belongs to device " + std::to_string(h->device) + ", current is " +
                  std::to_string(current_device()));
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  auto on_device = [&](const void* p, size_t bytes) { return bytes == 0 || device_of(p, bytes) == h->device; };
  if (!on_device(C, span(m, n, ldc, sizeof(T))) || (k > 0 && (!on_device(A, span(a_rows, a_cols, lda, sizeof(T))) ||
                                                              !on_device(B, span(b_rows, b_cols, ldb, sizeof(T))))))
    return refuse(call + ": a matrix is not inside device memory of device " + std::to_string(h->device));
  CUstream_st* s = resolve(h->stream);
  if (!s) return CUBLAS_STATUS_EXECUTION_FAILED;
  const T al = *alpha, be = *beta;  // host pointer mode: read at the call
  enqueue(s, [=] {
    // Column-major views with the given leading dimensions; Eigen does the arithmetic.
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
    using Stride = Eigen::OuterStride<>;
    Eigen::Map<Mat, 0, Stride> c(C, m, n, Stride(ldc));
    if (k == 0) {
      if (be == T(0))
        c.setZero();
      else
        c *= be;
      return;
    }
    Eigen::Map<const Mat, 0, Stride> a(A, a_rows, a_cols, Stride(lda)), b(B, b_rows, b_cols, Stride(ldb));
    Mat prod = ta == CUBLAS_OP_N ? (tb == CUBLAS_OP_N ? Mat(a * b) : Mat(a * b.transpose()))
                                 : (tb == CUBLAS_OP_N ? Mat(a.transpose() * b) : Mat(a.transpose() * b.transpose()));
    if (be == T(0))
      c = al * prod;  // beta == 0: C is not read (NaN there is ignored), as in cuBLAS
    else
      c = al * prod + be * c;
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
  return gemm("cublasSgemm", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                           double* C, int ldc) {
  return gemm("cublasDgemm", h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
