// The CPU backend's optimizer steps: tensor/optim_step.h's sgd_update and adam_update over contiguous
// arrays. The Adam step is
// compiled in its own target without math-errno so that the square root vectorizes (a sqrt that may
// set errno is a branch, and a loop with one stays scalar).
#pragma once

#include <cstdint>

#include "tensor/optim_step.h"

namespace lockstep::cpu {

// p, m (exp_avg), v (exp_avg_sq) and, with args.amsgrad, vmax (max_exp_avg_sq) updated in place from g;
// n elements each, distinct arrays.
void adam_step(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamStepArgs& args);
void adam_step(double* p, const double* g, double* m, double* v, double* vmax, int64_t n, const AdamStepArgs& args);

// torch.optim.SGD's update (tensor/optim_step.h's sgd_update) over n elements; m (the momentum buffer)
// is used only with momentum. Distinct arrays.
template <typename T>
void sgd_step(T* p, const T* g, T* m, int64_t n, const detail::SgdScalars<T>& s, bool momentum, bool first,
              bool nesterov);

}  // namespace lockstep::cpu
