// cuBLAS is loaded on the first GPU matmul (tensor/cuda/cublas_api.h): a CPU-only run never maps
// libcublas/libcublasLt (~140 MiB resident); the first load finds every entry point lockstep calls.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/api.h"
#include "tests/cuda/cuda_test_util.h"

#ifdef LOCKSTEP_WITH_CUDA
#include "tensor/cuda/cublas_api.h"
#endif

namespace lockstep {
namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  return all.str().find(library) != std::string::npos;
}

TEST_CASE("CPU work does not load cuBLAS; the first load resolves every entry point") {
#ifndef LOCKSTEP_WITH_CUDA
  MESSAGE("built without CUDA: nothing to load");
#else
  // One ordered case: the load below is once per process.
  Tensor a = internal::reshape(arange(6, kFloat32), {2, 3});
  Tensor c = internal::matmul(a, a, false, true);
  CHECK(c.to_vector<float>() == std::vector<float>{5, 14, 14, 50});
  CHECK(cuda::device_count() >= 0);
  CHECK_FALSE(cuda::detail::cublas_loaded());
  CHECK_FALSE(mapped("libcublas"));

  // The library loads with or without a GPU (only a handle needs one); under the emulator the table
  // points at the emulator's functions.
  const cuda::detail::CublasApi& api = cuda::detail::cublas_api();
  CHECK(cuda::detail::cublas_loaded());
#define LOCKSTEP_CHECK_ENTRY(f, type) CHECK_MESSAGE(bool(api.f), #f);
  LOCKSTEP_CUBLAS_FUNCTIONS(LOCKSTEP_CHECK_ENTRY)
#undef LOCKSTEP_CHECK_ENTRY
  CHECK(std::string(api.cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED)) == "CUBLAS_STATUS_NOT_INITIALIZED");
#ifndef LOCKSTEP_CUDA_EMU
  CHECK(mapped("libcublasLt"));
#endif

  if (testing::kHaveCudaDevice) {
    Tensor g = internal::to_device(a, Device::cuda(0));
    CHECK(internal::matmul(g, g, false, true).to_vector<float>() == std::vector<float>{5, 14, 14, 50});
  }
#endif
}

}  // namespace
}  // namespace lockstep
