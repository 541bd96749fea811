// The CPU backend's optimizer steps: tensor/optim_step.h's sgd_update and adam_update over contiguous
// arrays, compiled for x86-64-v3 and for v4 (tensor/cpu/isa.h): call them through
// LOCKSTEP_CPU_ISA_CALL. Built without math-errno so that Adam's square root vectorizes (a sqrt that
// may set errno is a branch, and a loop with one stays scalar).
//
// Both steps compute in compute_t<T>: a bfloat16 or float16 parameter and its state (kept in the
// parameter's dtype, as PyTorch keeps a bfloat16 parameter's exp_avg and exp_avg_sq) are loaded into
// float32, updated there and rounded once on store, as CUDA's kernels do.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/optim_step.h"

#define LOCKSTEP_CPU_OPTIM_DECL(isa)                                                                          \
  namespace lockstep::cpu::isa {                                                                              \
  /* p, m (exp_avg), v (exp_avg_sq) and, with args.amsgrad, vmax (max_exp_avg_sq) updated in place from g; */ \
  /* n elements each, distinct arrays. */                                                                    \
  template <typename T>                                                                                       \
  void adam_step(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStepArgs& args);                 \
  /* torch.optim.SGD's update over n elements; m (the momentum buffer) is used only with momentum. */        \
  template <typename T>                                                                                       \
  void sgd_step(T* p, const T* g, T* m, int64_t n, const detail::SgdScalars<compute_t<T>>& s, bool momentum,   \
                bool first, bool nesterov);                                                                   \
  /* The optimizer-step table's row `rule` over n elements; s0..s2 the rule's states (null if unused). */     \
  template <typename T>                                                                                       \
  void optim_step(OptimRule rule, T* p, const T* g, T* s0, T* s1, T* s2, int64_t n, const OptimStepArgs& args); \
  }
LOCKSTEP_CPU_OPTIM_DECL(avx2)
LOCKSTEP_CPU_OPTIM_DECL(avx512)
#undef LOCKSTEP_CPU_OPTIM_DECL
