// parameters_to_vector / vector_to_parameters: torch.nn.utils' conversions between a model's parameters
// and one flat vector (for second-order optimizers, evolution strategies, weight averaging).
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace lockstep::nn::utils {

// Every parameter flattened and concatenated in order into one 1-D tensor (a copy, differentiable). All
// parameters must be on one device.
Tensor parameters_to_vector(const std::vector<Tensor>& parameters);

// Points each parameter at its slice of vec, in order, as PyTorch's `param.data = vec[a:b].view_as(param)`:
// afterwards the parameters share vec's storage. vec is 1-D with exactly as many elements as the
// parameters together, on their device.
void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters);

}  // namespace lockstep::nn::utils
