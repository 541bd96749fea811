// GEMM for the x86-64-v3 baseline (the build's default flags).
#include <Eigen/Dense>
#include <cstdint>

namespace lockstep::cpu::avx2 {
#include "tensor/cpu/gemm_kernel.inc"
}  // namespace lockstep::cpu::avx2
