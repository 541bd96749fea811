// clip_grad_norm_ and clip_grad_value_ (clip_grad.h), on the raw ops: per-gradient norms, the norm of
// those norms, then one in-place scaling per gradient, as PyTorch's foreach path computes them.
#include "nn/utils/clip_grad.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn::utils {
namespace {

// torch.linalg.vector_norm(t, p) over all elements, a [] tensor of t's dtype.
Tensor vector_norm(const Tensor& t, double p) {
  using namespace internal;
  const Tensor flat = reshape(t, {t.numel()});
  if (std::isinf(p)) return t.numel() ? max(abs(flat), 0) : zeros({}, TensorOptions(t.dtype(), t.device()));
  if (p == 2) return sqrt(sum(mul(flat, flat)));
  if (p == 1) return sum(abs(flat));
  return binary_scalar(BinaryOp::Pow, sum(binary_scalar(BinaryOp::Pow, abs(flat), p)), 1.0 / p);
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard no_grad;
  LOCKSTEP_CHECK(norm_type > 0 && !std::isnan(norm_type), "clip_grad_norm_: invalid norm_type ", norm_type,
                 " (expected a positive number or infinity)");
  LOCKSTEP_CHECK(!std::isnan(max_norm), "clip_grad_norm_: invalid max_norm ", max_norm);
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    LOCKSTEP_CHECK(p.defined(), "clip_grad_norm_: parameter ", grads.size(), " is undefined");
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return scalar_tensor(0.0);
  const Device first = grads[0].device();
  std::vector<Tensor> norms;
  for (size_t i = 0; i < grads.size(); ++i) {
    LOCKSTEP_CHECK(grads[i].is_floating_point(), "clip_grad_norm_: gradient ", i, " has dtype ", grads[i].dtype(),
                   ", expected a floating-point one");
    norms.push_back(internal::to_device(vector_norm(grads[i], norm_type), first));
  }
  const Tensor total = vector_norm(internal::stack(norms), norm_type);
  const double total_value = internal::to_dtype(total, kFloat64).item<double>();
  LOCKSTEP_CHECK(!error_if_nonfinite || std::isfinite(total_value), "clip_grad_norm_: the total norm of order ",
                 norm_type, " for gradients from `parameters` is non-finite (", total_value,
                 "), so it cannot be clipped. To scale the gradients by the non-finite norm anyway, set "
                 "error_if_nonfinite=false");
  // clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1, in total's dtype.
  const Tensor coef = internal::binary_scalar(BinaryOp::Div, internal::add(total, 1e-6), max_norm, true);
  const double c = std::min(internal::to_dtype(coef, kFloat64).item<double>(), 1.0);
  if (!(c == 1.0)) {  // scaling by 1 changes nothing
    for (Tensor g : grads) internal::mul_(g, c);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  NoGradGuard no_grad;
  LOCKSTEP_CHECK(std::isfinite(clip_value), "clip_grad_value_: invalid clip_value ", clip_value);
  for (const Tensor& p : parameters) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    const Tensor lo = internal::binary_scalar(BinaryOp::Maximum, g, -clip_value);
    internal::copy_(g, internal::binary_scalar(BinaryOp::Minimum, lo, clip_value));
  }
}

}  // namespace lockstep::nn::utils
