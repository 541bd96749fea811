// get_total_norm, clip_grads_with_norm_, clip_grad_norm_ and clip_grad_value_ (clip_grad.h), on the raw
// ops: per-gradient norms, the norm of those norms, then one in-place scaling per gradient, as PyTorch's
// foreach path computes them.
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

void check_norm_type(double norm_type, const char* op) {
  LOCKSTEP_CHECK(norm_type > 0 && !std::isnan(norm_type), op, ": invalid norm_type ", norm_type,
                 " (expected a positive number or infinity)");
}

}  // namespace

Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type, bool error_if_nonfinite) {
  NoGradGuard no_grad;
  check_norm_type(norm_type, "get_total_norm");
  if (tensors.empty()) return scalar_tensor(0.0);
  const Device first = tensors[0].device();
  std::vector<Tensor> norms;
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOCKSTEP_CHECK(tensors[i].is_floating_point(), "get_total_norm: tensor ", i, " has dtype ", tensors[i].dtype(),
                   ", expected a floating-point one");
    norms.push_back(internal::to_device(vector_norm(tensors[i], norm_type), first));
  }
  Tensor total = vector_norm(internal::stack(norms), norm_type);
  LOCKSTEP_CHECK(!error_if_nonfinite || std::isfinite(internal::to_dtype(total, kFloat64).item<double>()),
                 "get_total_norm: the total norm of order ", norm_type, " is non-finite (",
                 internal::to_dtype(total, kFloat64).item<double>(), ")");
  return total;
}

void clip_grads_with_norm_(const std::vector<Tensor>& parameters, double max_norm, const Tensor& total_norm) {
  NoGradGuard no_grad;
  LOCKSTEP_CHECK(!std::isnan(max_norm), "clip_grads_with_norm_: invalid max_norm ", max_norm);
  LOCKSTEP_CHECK(total_norm.defined() && total_norm.numel() == 1, "clip_grads_with_norm_: total_norm must be one "
                 "element, got ", total_norm.defined() ? total_norm.shape() : Shape{});
  // clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1, in total's dtype.
  const Tensor coef = internal::binary_scalar(BinaryOp::Div, internal::add(total_norm, 1e-6), max_norm, true);
  const double c = std::min(internal::to_dtype(coef, kFloat64).item<double>(), 1.0);
  if (c == 1.0) return;  // scaling by 1 changes nothing
  for (const Tensor& p : parameters) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    internal::mul_(g, c);
  }
}

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard no_grad;
  check_norm_type(norm_type, "clip_grad_norm_");
  LOCKSTEP_CHECK(!std::isnan(max_norm), "clip_grad_norm_: invalid max_norm ", max_norm);
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    LOCKSTEP_CHECK(p.defined(), "clip_grad_norm_: parameter ", grads.size(), " is undefined");
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return scalar_tensor(0.0);
  for (size_t i = 0; i < grads.size(); ++i)
    LOCKSTEP_CHECK(grads[i].is_floating_point(), "clip_grad_norm_: gradient ", i, " has dtype ", grads[i].dtype(),
                   ", expected a floating-point one");
  const Tensor total = get_total_norm(grads, norm_type);
  const double total_value = internal::to_dtype(total, kFloat64).item<double>();
  LOCKSTEP_CHECK(!error_if_nonfinite || std::isfinite(total_value), "clip_grad_norm_: the total norm of order ",
                 norm_type, " for gradients from `parameters` is non-finite (", total_value,
                 "), so it cannot be clipped. To scale the gradients by the non-finite norm anyway, set "
                 "error_if_nonfinite=false");
  clip_grads_with_norm_(parameters, max_norm, total);
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
