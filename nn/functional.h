// Stateless functions behind the modules, as torch.nn.functional.
#pragma once

#include "autograd/functions.h"

namespace lockstep::nn::functional {

// Mean over the batch of -log_softmax(input)[i, target[i]]: input [N, C] logits, target int64 [N]
// class indices in [0, C). The log-sum-exp is computed stably.
Tensor cross_entropy(const Tensor& input, const Tensor& target);
// Mean of (input - target)^2 over all elements; shapes must match.
Tensor mse_loss(const Tensor& input, const Tensor& target);
inline Tensor relu(const Tensor& x) { return lockstep::relu(x); }
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor()) { return lockstep::linear(x, w, b); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return lockstep::log_softmax(x, dim); }

}  // namespace lockstep::nn::functional
