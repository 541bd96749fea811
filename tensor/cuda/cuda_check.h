// LOCKSTEP_CUDA_CHECK: every CUDA runtime call and kernel launch in lockstep goes through it. A failure
// throws lockstep::Error naming the call, file:line and CUDA's description, e.g.
//   CUDA error: cudaMalloc(&p, size) failed at tensor/cuda/allocator.cpp:80: initialization error
//   (cudaErrorInitializationError)
#pragma once

#include <cuda_runtime_api.h>

namespace lockstep::cuda::detail {

// Throws the error above. Also clears CUDA's last-error slot, so that the next launch check does not
// report this error a second time.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

}  // namespace lockstep::cuda::detail

#define LOCKSTEP_CUDA_CHECK(call)                                                          \
  do {                                                                                     \
    cudaError_t lockstep_err_ = (call);                                                    \
    if (lockstep_err_ != cudaSuccess)                                                      \
      ::lockstep::cuda::detail::throw_cuda_error(lockstep_err_, #call, __FILE__, __LINE__); \
  } while (0)
