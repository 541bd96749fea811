// cuBLAS through a table of entry points filled on the first GPU matmul (dlopen), not at program start.
//
// Why: libcublas pulls in libcublasLt, whose start-up alone makes ~140 MiB of every process resident
// (its relocated data and the code its constructors touch), GPU or not. Linking it made a CPU-only
// run of any lockstep binary start at ~200 MiB; loading it on first use, as PyTorch loads its optional
// libraries, leaves CPU runs without it. Under the CUDA emulator the table points at the emulator's
// functions, which are linked into the binary.
#pragma once

#include <cublas_v2.h>

#include <type_traits>

namespace lockstep::cuda::detail {

// The cuBLAS functions lockstep calls and their types: a row each. cublas_v2.h maps some names to their
// _v2 symbols (cublasCreate -> cublasCreate_v2); the table's members and the symbols looked up follow
// the mapping. The Ex products name their type: C++ code also sees inline overloads taking the old
// cudaDataType compute type.
#define LOCKSTEP_CUBLAS_FN(f) decltype(&::f)
#define LOCKSTEP_CUBLAS_FUNCTIONS(X)                                                                      \
  X(cublasCreate, LOCKSTEP_CUBLAS_FN(cublasCreate))                                                       \
  X(cublasSetStream, LOCKSTEP_CUBLAS_FN(cublasSetStream))                                                 \
  X(cublasSetMathMode, LOCKSTEP_CUBLAS_FN(cublasSetMathMode))                                             \
  X(cublasGetStatusName, LOCKSTEP_CUBLAS_FN(cublasGetStatusName))                                         \
  X(cublasGetStatusString, LOCKSTEP_CUBLAS_FN(cublasGetStatusString))                                     \
  X(cublasSgemm, LOCKSTEP_CUBLAS_FN(cublasSgemm))                                                         \
  X(cublasSgemmStridedBatched, LOCKSTEP_CUBLAS_FN(cublasSgemmStridedBatched))                             \
  X(cublasDgemm, LOCKSTEP_CUBLAS_FN(cublasDgemm))                                                         \
  X(cublasDgemmStridedBatched, LOCKSTEP_CUBLAS_FN(cublasDgemmStridedBatched))                             \
  X(cublasGemmEx, cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,  \
                                     const void*, const void*, cudaDataType, int, const void*, cudaDataType, \
                                     int, const void*, void*, cudaDataType, int, cublasComputeType_t,       \
                                     cublasGemmAlgo_t))                                                    \
  X(cublasGemmStridedBatchedEx,                                                                           \
    cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,  \
                       const void*, cudaDataType, int, long long, const void*, cudaDataType, int, long long, \
                       const void*, void*, cudaDataType, int, long long, int, cublasComputeType_t,         \
                       cublasGemmAlgo_t))

struct CublasApi {
#define LOCKSTEP_CUBLAS_MEMBER(f, type) std::type_identity_t<type> f = nullptr;
  LOCKSTEP_CUBLAS_FUNCTIONS(LOCKSTEP_CUBLAS_MEMBER)
#undef LOCKSTEP_CUBLAS_MEMBER
};

// cuBLAS's entry points, loading the library on the first call (thread-safe). Throws, naming the
// library and what the loader said, where it cannot be loaded or lacks a function.
const CublasApi& cublas_api();

// Whether this process has loaded cuBLAS (a CPU-only run never should).
bool cublas_loaded();

}  // namespace lockstep::cuda::detail
