// The CPU backend's optimizer steps: tensor/optim_step.h's sgd_update and adam_update over contiguous
// arrays. The Adam step is
// compiled in its own target without math-errno so that the square root vectorizes (a sqrt that may
// set errno is a branch, and a loop with one stays scalar).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/optim_step.h"

namespace lockstep::cpu {

// Both steps compute in compute_t<T>: a bfloat16 or float16 parameter and its state are loaded into
// float32, updated there and rounded once on store, as CUDA's kernels do.

// p, m (exp_avg), v (exp_avg_sq) and, with args.amsgrad, vmax (max_exp_avg_sq) updated in place from g;
// n elements each, distinct arrays.
template <typename T>
void adam_step(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStepArgs& args);

// torch.optim.SGD's update (tensor/optim_step.h's sgd_update) over n elements; m (the momentum buffer)
// is used only with momentum. Distinct arrays.
template <typename T>
void sgd_step(T* p, const T* g, T* m, int64_t n, const detail::SgdScalars<compute_t<T>>& s, bool momentum,
              bool first, bool nesterov);

}  // namespace lockstep::cpu
