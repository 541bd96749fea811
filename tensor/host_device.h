// LOCKSTEP_HOST_DEVICE: marks a function both the CPU backend and the CUDA kernels call, so the two
// backends share one definition of each rule (nvcc compiles it for both sides; g++ sees a plain inline).
#pragma once

#ifdef __CUDACC__
#define LOCKSTEP_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_HOST_DEVICE
#endif
