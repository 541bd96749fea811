// The CPU backend's fused Adam/AdamW step: tensor/optim_step.h's adam_update over contiguous arrays,
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

}  // namespace lockstep::cpu
