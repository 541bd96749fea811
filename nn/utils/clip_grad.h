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

// Every gradient clamped to [-clip_value, clip_value], as torch.nn.utils.clip_grad_value_.
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace lockstep::nn::utils
