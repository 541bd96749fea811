// Runtime choice between the AVX-512 and AVX2 GEMM kernels.
#include "tensor/cpu/gemm.h"

#include <cstdlib>
#include <cstring>

namespace lockstep::cpu {

#define LOCKSTEP_GEMM_DECL(ns)                                                                                  \
  namespace ns {                                                                                                \
  void gemm_f32(const float*, int64_t, int64_t, bool, const float*, int64_t, int64_t, bool, float*, float, float); \
  void gemm_f64(const double*, int64_t, int64_t, bool, const double*, int64_t, int64_t, bool, double*, double,   \
                double);                                                                                         \
  }
LOCKSTEP_GEMM_DECL(avx2)
LOCKSTEP_GEMM_DECL(avx512)
#undef LOCKSTEP_GEMM_DECL

static bool use_avx512() {
  static const bool yes = [] {
    const char* isa = std::getenv("LOCKSTEP_CPU_ISA");
    if (isa && std::strcmp(isa, "avx2") == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
  }();
  return yes;
}

const char* gemm_isa() { return use_avx512() ? "avx512" : "avx2"; }

void gemm(const float* a, int64_t ar, int64_t ac, bool ta, const float* b, int64_t br, int64_t bc, bool tb, float* c,
          float alpha, float beta) {
  (use_avx512() ? avx512::gemm_f32 : avx2::gemm_f32)(a, ar, ac, ta, b, br, bc, tb, c, alpha, beta);
}

void gemm(const double* a, int64_t ar, int64_t ac, bool ta, const double* b, int64_t br, int64_t bc, bool tb,
          double* c, double alpha, double beta) {
  (use_avx512() ? avx512::gemm_f64 : avx2::gemm_f64)(a, ar, ac, ta, b, br, bc, tb, c, alpha, beta);
}

}  // namespace lockstep::cpu
