// torch.optim.Adam/AdamW's update of one element, as both backends compute it (the CPU loop and the
// CUDA kernel call the same function, so they agree bit for bit). optim/adam.h states the rule; the
// scalars that depend only on the step count are computed once per step on the host (AdamStepArgs) and
// arrive here converted to the parameter's type, as PyTorch's CPU kernels convert Python scalars.
#pragma once

#include <math.h>

#include "tensor/host_device.h"

namespace lockstep {

// The host side of one Adam step for one parameter (float64, from optim/adam.cpp).
struct AdamStepArgs {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  double step_size = 0;              // lr / (1 - beta1^step)
  double bias_correction2_sqrt = 1;  // sqrt(1 - beta2^step)
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * weight_decay; Adam: g += weight_decay * p
  bool amsgrad = false;
  bool maximize = false;
};

namespace detail {

LOCKSTEP_HOST_DEVICE inline float adam_sqrt(float x) { return ::sqrtf(x); }
LOCKSTEP_HOST_DEVICE inline double adam_sqrt(double x) { return ::sqrt(x); }

// AdamStepArgs in the element type T.
template <typename T>
struct AdamScalars {
  T decay;            // 1 - lr * weight_decay (AdamW) or weight_decay (Adam)
  T lerp_weight;      // 1 - beta1
  T beta2, one_minus_beta2;
  T bias_correction2_sqrt, eps;
  T neg_step_size;    // -lr / (1 - beta1^step)
  bool weight_decay, decoupled, amsgrad, maximize;

  explicit AdamScalars(const AdamStepArgs& a)
      : decay(T(a.decoupled_weight_decay ? 1 - a.lr * a.weight_decay : a.weight_decay)),
        lerp_weight(T(1 - a.beta1)),
        beta2(T(a.beta2)),
        one_minus_beta2(T(1 - a.beta2)),
        bias_correction2_sqrt(T(a.bias_correction2_sqrt)),
        eps(T(a.eps)),
        neg_step_size(T(-a.step_size)),
        weight_decay(a.weight_decay != 0),
        decoupled(a.decoupled_weight_decay),
        amsgrad(a.amsgrad),
        maximize(a.maximize) {}
};

// One element of the update: p, m (exp_avg), v (exp_avg_sq) and vmax (max_exp_avg_sq, read and
// written only with amsgrad) in place. Each line is the PyTorch op it mirrors (_single_tensor_adam).
template <typename T>
LOCKSTEP_HOST_DEVICE inline void adam_update(T& p, T g, T& m, T& v, T& vmax, const AdamScalars<T>& s) {
  if (s.maximize) g = -g;
  if (s.weight_decay) {
    if (s.decoupled) p = p * s.decay;  // param.mul_(1 - lr * weight_decay)
    else g = g + s.decay * p;          // grad = grad.add(param, alpha=weight_decay)
  }
  // exp_avg.lerp_(grad, 1 - beta1): at::lerp's two forms, chosen by the weight
  const T w = s.lerp_weight;
  m = (w < T(0.5) && w > T(-0.5)) ? m + w * (g - m) : g - (g - m) * (T(1) - w);
  v = v * s.beta2 + s.one_minus_beta2 * g * g;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
  T second = v;
  if (s.amsgrad) {
    vmax = (vmax != vmax || vmax >= v) ? vmax : v;  // torch.maximum (NaN propagates)
    second = vmax;
  }
  const T denom = adam_sqrt(second) / s.bias_correction2_sqrt + s.eps;
  p = p + s.neg_step_size * m / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
}

}  // namespace detail
}  // namespace lockstep
