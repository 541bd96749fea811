// The optimizer steps' update of one element, as both backends compute it: torch.optim.SGD's
// (sgd_update) and Adam/AdamW's (adam_update). The CPU loop and the CUDA kernel call the same function,
// so they agree bit for bit. optim/adam.h states the rule; the
// scalars that depend only on the step count are computed once per step on the host (AdamStepArgs) and
// arrive here converted to the parameter's type, as PyTorch's CPU kernels convert Python scalars.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

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

// The optimizers whose steps are a row of this table beside SGD's and Adam's own entries: each row names
// its per-element rule below (optim/adagrad.h and optim/rmsprop.h state them), which both backends run
// through Backend::optim_step over the parameter, its gradient and up to three state tensors.
enum class OptimRule : uint8_t {
  Adagrad,  // state0: sum
  RMSprop,  // state0: square_avg; state1: grad_avg (centered); state2: momentum_buffer (momentum > 0)
};

// The host side of one step (float64): lr is Adagrad's clr = lr / (1 + (step - 1) lr_decay).
struct OptimStepArgs {
  double lr = 0, eps = 0, weight_decay = 0, alpha = 0, momentum = 0;
  bool maximize = false, centered = false;
};

namespace detail {

// SGD's scalars in the element type T (from the float64 the optimizer holds, as PyTorch converts them).
template <typename T>
struct SgdScalars {
  T lr, momentum, one_minus_dampening, weight_decay;
};

// One element of torch.optim.SGD's update (optim/sgd.h states the rule): p and, with kMomentum, the
// momentum buffer m in place. The options are template arguments so the loops over it have no branch
// and vectorize; visit_sgd_options picks them from run-time flags.
template <bool kMomentum, bool kFirst, bool kNesterov, typename T>
LOCKSTEP_HOST_DEVICE inline void sgd_update(T& p, T g, T& m, const SgdScalars<T>& s) {
  T d = g + s.weight_decay * p;  // grad.add(param, alpha=weight_decay)
  if constexpr (kMomentum) {
    const T mi = kFirst ? d : s.momentum * m + s.one_minus_dampening * d;  // buf.mul_(momentum).add_(d, 1 - dampening)
    m = mi;
    d = kNesterov ? d + s.momentum * mi : mi;
  }
  p -= s.lr * d;  // param.add_(d, alpha=-lr)
}

// f(std::bool_constant<momentum>, std::bool_constant<first>, std::bool_constant<nesterov>); without
// momentum the other two do not matter and are false.
template <typename F>
decltype(auto) visit_sgd_options(bool momentum, bool first, bool nesterov, F&& f) {
  using std::bool_constant;
  if (!momentum) return f(bool_constant<false>{}, bool_constant<false>{}, bool_constant<false>{});
  if (first) {
    if (nesterov) return f(bool_constant<true>{}, bool_constant<true>{}, bool_constant<true>{});
    return f(bool_constant<true>{}, bool_constant<true>{}, bool_constant<false>{});
  }
  if (nesterov) return f(bool_constant<true>{}, bool_constant<false>{}, bool_constant<true>{});
  return f(bool_constant<true>{}, bool_constant<false>{}, bool_constant<false>{});
}

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

template <typename T>
struct OptimScalars {
  T neg_lr, eps, weight_decay, alpha, one_minus_alpha, momentum;
  bool maximize, has_weight_decay, centered, has_momentum;
  explicit OptimScalars(const OptimStepArgs& a)
      : neg_lr(T(-a.lr)), eps(T(a.eps)), weight_decay(T(a.weight_decay)), alpha(T(a.alpha)),
        one_minus_alpha(T(1 - a.alpha)), momentum(T(a.momentum)), maximize(a.maximize),
        has_weight_decay(a.weight_decay != 0), centered(a.centered), has_momentum(a.momentum > 0) {}
};

// at::lerp's two forms, chosen by the weight (as adam_update's exp_avg).
template <typename T>
LOCKSTEP_HOST_DEVICE inline T optim_lerp(T self, T end, T w) {
  return (w < T(0.5) && w > T(-0.5)) ? self + w * (end - self) : end - (end - self) * (T(1) - w);
}

// Each line is the PyTorch op it mirrors (_single_tensor_adagrad / _single_tensor_rmsprop), with ATen's
// evaluation order: addcmul is self + (value * t1) * t2, addcdiv self + (value * t1) / t2.
template <typename T>
LOCKSTEP_HOST_DEVICE inline void adagrad_update(T& p, T g, T& sum, const OptimScalars<T>& s) {
  if (s.maximize) g = -g;
  if (s.has_weight_decay) g = g + s.weight_decay * p;  // grad.add(param, alpha=weight_decay)
  sum = sum + g * g;                                   // state_sum.addcmul_(grad, grad, value=1)
  const T std = adam_sqrt(sum) + s.eps;                // state_sum.sqrt().add_(eps)
  p = p + (s.neg_lr * g) / std;                        // param.addcdiv_(grad, std, value=-clr)
}

template <typename T>
LOCKSTEP_HOST_DEVICE inline void rmsprop_update(T& p, T g, T& square_avg, T& grad_avg, T& buf,
                                                const OptimScalars<T>& s) {
  if (s.maximize) g = -g;
  if (s.has_weight_decay) g = g + s.weight_decay * p;                // grad.add(param, alpha=weight_decay)
  square_avg = square_avg * s.alpha + (s.one_minus_alpha * g) * g;   // mul_(alpha).addcmul_(g, g, 1 - alpha)
  T avg;
  if (s.centered) {
    grad_avg = optim_lerp(grad_avg, g, s.one_minus_alpha);           // grad_avg.lerp_(grad, 1 - alpha)
    avg = adam_sqrt(square_avg - grad_avg * grad_avg);               // addcmul(ga, ga, value=-1).sqrt_()
  } else {
    avg = adam_sqrt(square_avg);                                     // square_avg.sqrt()
  }
  avg = avg + s.eps;                                                 // avg.add_(eps)
  if (s.has_momentum) {
    buf = buf * s.momentum + g / avg;                                // buf.mul_(momentum).addcdiv_(grad, avg)
    p = p + s.neg_lr * buf;                                          // param.add_(buf, alpha=-lr)
  } else {
    p = p + (s.neg_lr * g) / avg;                                    // param.addcdiv_(grad, avg, value=-lr)
  }
}

// One element of row `rule`: states in the order OptimRule lists them (unused ones are ignored).
template <typename T>
LOCKSTEP_HOST_DEVICE inline void optim_update(OptimRule rule, T& p, T g, T& s0, T& s1, T& s2,
                                              const OptimScalars<T>& s) {
  switch (rule) {
    case OptimRule::Adagrad: adagrad_update(p, g, s0, s); return;
    case OptimRule::RMSprop: rmsprop_update(p, g, s0, s1, s2, s); return;
  }
}

}  // namespace detail
}  // namespace lockstep
