// The CUDA emulator's cuBLAS: GEMM, plain and strided batched (by Eigen, on column-major views), after
// the checks cuBLAS makes (dimensions, leading dimensions, batch count, the handle's device), and that
// every matrix of every batch lies inside one device allocation on the handle's device: a wrong leading
// dimension, batch stride or a swapped operand shows up as an error or a wrong value here, as it would
// on the GPU.
#include <cublas_v2.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

// cuBLAS's checks of a GEMM call: operations, dimensions, leading dimensions, the handle's device,
// and every matrix of every batch inside device memory of that device (elements of ea, eb, ec bytes).
cublasStatus_t check_gemm(const std::string& call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                          int n, int k, const void* A, int lda, long long strideA, size_t ea, const void* B, int ldb,
                          long long strideB, size_t eb, const void* C, int ldc, long long strideC, size_t ec,
                          int batch) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
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
  if (!batch_on_device(C, span(m, n, ldc, ec), strideC, batch, ec, dev) ||
      (k > 0 && (!batch_on_device(A, span(a_rows, a_cols, lda, ea), strideA, batch, ea, dev) ||
                 !batch_on_device(B, span(b_rows, b_cols, ldb, eb), strideB, batch, eb, dev))))
    return refuse(call + ": a matrix is not inside device memory of device " + std::to_string(dev));
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) op(B) + beta C on column-major Eigen views (beta == 0: C is not read, so NaN there
// is ignored, as in cuBLAS).
template <typename Mat, typename MapA, typename MapB, typename MapC, typename T>
void product(cublasOperation_t ta, cublasOperation_t tb, int k, const MapA& a, const MapB& b, MapC& c, T al, T be) {
  if (k == 0) {
    if (be == T(0)) c.setZero();
    else c *= be;
    return;
  }
  Mat prod = ta == CUBLAS_OP_N ? (tb == CUBLAS_OP_N ? Mat(a * b) : Mat(a * b.transpose()))
                               : (tb == CUBLAS_OP_N ? Mat(a.transpose() * b) : Mat(a.transpose() * b.transpose()));
  if (be == T(0)) c = al * prod;
  else c = al * prod + be * c;
}

// C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for i < batch, matrix i of X at X + i * strideX;
// cublas?gemm is batch 1.
template <typename T>
cublasStatus_t gemm(const char* name, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const T* alpha, const T* A, int lda, long long strideA, const T* B, int ldb, long long strideB,
                    const T* beta, T* C, int ldc, long long strideC, int batch) {
  const cublasStatus_t st = check_gemm(name, h, ta, tb, m, n, k, A, lda, strideA, sizeof(T), B, ldb, strideB,
                                       sizeof(T), C, ldc, strideC, sizeof(T), batch);
  if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0 || batch == 0) return st;
  CUstream_st* s = resolve(h->stream);
  if (!s) return CUBLAS_STATUS_EXECUTION_FAILED;
  const T al = *alpha, be = *beta;  // host pointer mode: read at the call
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  enqueue(s, [=] {
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
    using Stride = Eigen::OuterStride<>;
    for (int i = 0; i < batch; ++i) {
      Eigen::Map<Mat, 0, Stride> c(C + i * strideC, m, n, Stride(ldc));
      Eigen::Map<const Mat, 0, Stride> a(A + i * strideA, a_rows, a_cols, Stride(std::max(lda, 1))),
          b(B + i * strideB, b_rows, b_cols, Stride(std::max(ldb, 1)));
      product<Mat>(ta, tb, k, a, b, c, al, be);
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

// The storage types cublasGemmEx takes here: bfloat16 and half read into float and rounded to nearest
// even on the way back, as the tensor cores' float32 accumulation leaves them.
size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_64F ? 8 : 2; }

float load(cudaDataType t, const void* p, size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  if (t == CUDA_R_16BF) {
    const uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  // IEEE half: sign, 5 exponent bits (bias 15), 10 mantissa bits; subnormals scale by 2^-24.
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
  const float mag = exp == 0    ? std::ldexp(float(man), -24)
                    : exp == 31 ? (man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity())
                                : std::ldexp(float(man | 1024), int(exp) - 25);
  return sign ? -mag : mag;
}

void store(cudaDataType t, void* p, size_t i, float f) {
  if (t == CUDA_R_32F) {
    static_cast<float*>(p)[i] = f;
    return;
  }
  uint16_t out;
  if (t == CUDA_R_16BF) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    out = std::isnan(f) ? uint16_t(0x7fc0) : uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  } else {  // half: round to nearest even through a float with 10 mantissa bits
    const float a = std::fabs(f);
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isnan(f)) out = 0x7e00;
    else if (a >= 65520.0f) out = sign | 0x7c00;  // rounds to inf
    else if (a < std::ldexp(1.0f, -14)) out = sign | uint16_t(std::nearbyint(std::ldexp(a, 24)));  // subnormal
    else {
      int e;
      const float m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
      const uint32_t q = uint32_t(std::nearbyint(std::ldexp(m, 11)));  // 11 significant bits, may carry to 2048
      out = q == 2048 ? uint16_t(sign | ((e + 15) << 10)) : uint16_t(sign | ((e + 14) << 10) | (q - 1024));
    }
  }
  static_cast<uint16_t*>(p)[i] = out;
}

// cublasGemmEx / cublasGemmStridedBatchedEx: A and B of one 16-bit or float type, C of that type or
// float, float32 compute (the only mode lockstep asks for).
cublasStatus_t gemm_ex(const char* name, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, const void* alpha, const void* A, cudaDataType at, int lda, long long strideA,
                       const void* B, cudaDataType bt, int ldb, long long strideB, const void* beta, void* C,
                       cudaDataType ct, int ldc, long long strideC, int batch, cublasComputeType_t compute) {
  const std::string call = name;
  const bool sixteen = at == CUDA_R_16BF || at == CUDA_R_16F;
  if (!(sixteen || at == CUDA_R_32F) || bt != at || !(ct == at || ct == CUDA_R_32F))
    return refuse(call + ": the emulator takes A and B of one type (16BF, 16F or 32F) and C of that type or 32F");
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return refuse(call + ": only CUBLAS_COMPUTE_32F is emulated");
  const cublasStatus_t st = check_gemm(call, h, ta, tb, m, n, k, A, lda, strideA, type_size(at), B, ldb, strideB,
                                       type_size(bt), C, ldc, strideC, type_size(ct), batch);
  if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0 || batch == 0) return st;
  CUstream_st* s = resolve(h->stream);
  if (!s) return CUBLAS_STATUS_EXECUTION_FAILED;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  enqueue(s, [=] {
    using Mat = Eigen::MatrixXf;
    auto read = [](cudaDataType t, const void* p, long long offset, int rows, int cols, int ld) {
      Mat x(rows, cols);
      for (int j = 0; j < cols; ++j)
        for (int r = 0; r < rows; ++r) x(r, j) = load(t, p, size_t(offset + (long long)j * ld + r));
      return x;
    };
    for (int i = 0; i < batch; ++i) {
      Mat a = read(at, A, i * strideA, a_rows, a_cols, lda), b = read(bt, B, i * strideB, b_rows, b_cols, ldb);
      Mat c = be == 0.0f ? Mat::Zero(m, n) : read(ct, C, i * strideC, m, n, ldc);
      product<Mat>(ta, tb, k, a, b, c, al, be);
      for (int j = 0; j < n; ++j)
        for (int r = 0; r < m; ++r) store(ct, C, size_t(i * strideC + (long long)j * ldc + r), c(r, j));
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

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm_ex("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc, 0,
                 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                                          long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  return gemm_ex("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                 strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType);
}
