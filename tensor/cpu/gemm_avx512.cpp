// GEMM for x86-64-v4 (AVX-512), compiled with -march=x86-64-v4. Eigen is included under another
// namespace name, so none of its (inline, template) functions built with AVX-512 can be merged by
// the linker with the baseline copies and end up running on a processor without AVX-512.
#include <cstdint>

#define Eigen lockstep_eigen_avx512
#include <Eigen/Dense>

namespace lockstep::cpu::avx512 {
#include "tensor/cpu/gemm_kernel.inc"
}  // namespace lockstep::cpu::avx512
