// clip_grad_norm_: torch.nn.utils.clip_grad_norm_. The norm of every gradient together (as if
// concatenated into one vector) is computed, and if it exceeds max_norm every gradient is scaled by
// max_norm / (total_norm + 1e-6). After DDP's all-reduce the gradients, hence the norm and the scaling,
// are the same on every rank.
#pragma once

#include <limits>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::nn::utils {

// Returns the total norm (a [] tensor of the gradients' dtype, on the first gradient's device; 0 when no
// parameter has a gradient). norm_type: a positive number or infinity (max |g|). With
// error_if_nonfinite, a NaN or infinite total norm throws instead of scaling the gradients by it.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// torch.nn.utils.get_total_norm: the norm of order norm_type of `tensors` together (the norm of their
// norms), a [] tensor of the first one's dtype on its device; 0 (float32, CPU) for none. norm_type as
// above; with error_if_nonfinite a NaN or infinite norm throws.
Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0, bool error_if_nonfinite = false);

// torch.nn.utils.clip_grads_with_norm_: every gradient of `parameters` scaled by
// max_norm / (total_norm + 1e-6) (computed in total_norm's dtype) where that is below 1. With
// get_total_norm this is clip_grad_norm_ in two steps, so that a norm can be combined across ranks in
// between (dist::clip_grad_norm_).
void clip_grads_with_norm_(const std::vector<Tensor>& parameters, double max_norm, const Tensor& total_norm);

// Every gradient clamped to [-clip_value, clip_value], as torch.nn.utils.clip_grad_value_.
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace lockstep::nn::utils
