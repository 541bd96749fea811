// The regression and likelihood losses (L1, SmoothL1, Huber, KLDiv, PoissonNLL, GaussianNLL), composed from
// the differentiable elementwise ops, so each has PyTorch's gradient without a backward of its own. Input and
// target broadcast as PyTorch's do. Under autocast those on PyTorch's float32 list (all but
// gaussian_nll_loss, a Python composite there) cast their operands to float32 once, here, as loss.cpp's do.
#include <cmath>
#include <numbers>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "tensor/backend.h"
#include "tensor/factory.h"

namespace lockstep::nn::functional {

namespace amp = autograd::amp;
using amp::AutocastOp;
using detail::check_broadcast;
using detail::reduce_loss;

namespace {

Tensor l1(const Tensor& x, const Tensor& y, const L1LossOptions& o) {
  check_broadcast("l1_loss", "input", x, "target", y);
  return reduce_loss(abs(x - y), o.reduction());
}

Tensor smooth_l1(const Tensor& x, const Tensor& y, const SmoothL1LossOptions& o) {
  check_broadcast("smooth_l1_loss", "input", x, "target", y);
  const double beta = o.beta();
  LOCKSTEP_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta, got ", beta);
  Tensor d = abs(x - y);
  // beta = 0 would divide 0 by 0 in the quadratic branch; it is the L1 loss (PyTorch's special case).
  if (beta == 0) return reduce_loss(d, o.reduction());
  return reduce_loss(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), o.reduction());
}

Tensor huber(const Tensor& x, const Tensor& y, const HuberLossOptions& o) {
  check_broadcast("huber_loss", "input", x, "target", y);
  const double delta = o.delta();
  LOCKSTEP_CHECK(delta > 0, "huber_loss does not support non-positive values for delta, got ", delta);
  Tensor d = abs(x - y);
  return reduce_loss(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), o.reduction());
}

Tensor kl(const Tensor& x, const Tensor& t, const KLDivLossOptions& o) {
  check_broadcast("kl_div", "input", x, "target", t);
  Tensor loss;
  if (o.log_target()) {
    loss = exp(t) * (t - x);
  } else {
    // xlogy(t, t): a target of 0 contributes 0. log reads 1 there, so neither the value nor the gradient
    // meets log(0) (PyTorch's xlogy backward gives NaN for such a target).
    Tensor safe = where(t != 0.0, t, 1.0);
    loss = t * log(safe) - t * x;
  }
  const KLDivReduction r = o.reduction();
  Tensor out = reduce_loss(loss, r.reduction());
  // As F.kl_div: the batch is input's first dimension, whatever the target broadcasts it to.
  if (r.batch_mean() && x.dim() > 0) out = out / static_cast<double>(x.size(0));
  return out;
}

Tensor poisson_nll(const Tensor& x, const Tensor& t, const PoissonNLLLossOptions& o) {
  check_broadcast("poisson_nll_loss", "input", x, "target", t);
  Tensor loss = o.log_input() ? exp(x) - t * x : x - t * log(x + o.eps());
  if (o.full()) {
    // Stirling's term only where target > 1, read at 1 elsewhere so that log(0) reaches neither the value
    // nor the target's gradient (PyTorch's masked_fill lets NaN through that gradient at target 0).
    Tensor big = t > 1.0;
    Tensor safe = where(big, t, 1.0);
    Tensor stirling = safe * log(safe) - safe + 0.5 * log(2 * std::numbers::pi * safe);
    loss = loss + where(big, stirling, 0.0);
  }
  return reduce_loss(loss, o.reduction());
}

}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossOptions& o) {
  const auto xy = amp::cast_inputs(AutocastOp::Loss, input, target);
  return l1(xy[0], xy[1], o);
}
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossOptions& o) {
  const auto xy = amp::cast_inputs(AutocastOp::Loss, input, target);
  return smooth_l1(xy[0], xy[1], o);
}
Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossOptions& o) {
  const auto xy = amp::cast_inputs(AutocastOp::Loss, input, target);
  return huber(xy[0], xy[1], o);
}
Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivLossOptions& o) {
  const auto xy = amp::cast_inputs(AutocastOp::Loss, input, target);
  return kl(xy[0], xy[1], o);
}
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNLLLossOptions& o) {
  const auto xy = amp::cast_inputs(AutocastOp::Loss, input, target);
  return poisson_nll(xy[0], xy[1], o);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var_in,
                         const GaussianNLLLossOptions& o) {
  check_broadcast("gaussian_nll_loss", "input", input, "target", target);
  LOCKSTEP_CHECK(var_in.defined(), "gaussian_nll_loss: got an undefined var");
  LOCKSTEP_CHECK(var_in.device() == input.device(), "gaussian_nll_loss: devices differ: input on ", input.device(),
                 ", var on ", var_in.device());
  if (supports(var_in.device(), Capability::kHostReadable, var_in.dtype()) && var_in.numel() > 0) {
    NoGradGuard no_grad;
    LOCKSTEP_CHECK(!(min(var_in.detach()).item<double>() < 0), "gaussian_nll_loss: var has negative entry/entries (var ",
                   var_in.shape(), ")");
  }
  const Shape& xs = input.shape();
  const Shape& vs = var_in.shape();
  Tensor var = var_in;
  if (vs != xs) {
    // PyTorch's homoscedastic forms: var without input's last dimension (one variance per row), or of
    // input's rank with the sizes that differ adding up to 1 (a single dimension of size 1 to broadcast).
    int64_t differing = 0;
    if (vs.size() == xs.size())
      for (size_t i = 0; i < xs.size(); ++i) differing += xs[i] != vs[i] ? vs[i] : 0;
    if (!xs.empty() && vs == Shape(xs.begin(), xs.end() - 1)) {
      var = unsqueeze(var_in, -1);
    } else {
      LOCKSTEP_CHECK(vs.size() == xs.size() && differing == 1, "gaussian_nll_loss: var is of incorrect size: var ", vs,
                     " for input ", xs, " (expected the input's shape, it without its last dimension, or it with one ",
                     "dimension of size 1)");
    }
  }
  var = detail::clamp_min_keeping_grad(var, o.eps());
  Tensor loss = 0.5 * (log(var) + square(input - target) / var);
  if (o.full()) loss = loss + 0.5 * std::log(2 * std::numbers::pi);
  return reduce_loss(loss, o.reduction());
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, double var, const GaussianNLLLossOptions& o) {
  LOCKSTEP_CHECK(var >= 0, "gaussian_nll_loss: var has negative entry/entries (var ", var, ")");
  LOCKSTEP_CHECK(input.defined(), "gaussian_nll_loss: got an undefined input");
  return gaussian_nll_loss(input, target, full_like(input, var), o);
}

}  // namespace lockstep::nn::functional
