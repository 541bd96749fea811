// What the files of differentiable ops share: whether to record, and gradients brought back to an
// input's shape and dtype.
#pragma once

#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::autograd {

template <typename... Ts>
bool any_requires_grad(const Ts&... ts) {
  return GradMode::is_enabled() && (ts.requires_grad() || ...);
}

// The gradient g of a broadcast, promoted operand x, summed back to x's shape and cast to its dtype.
inline Tensor reduce_grad(const Tensor& g, const Shape& shape, Dtype dtype) {
  return internal::to_dtype(internal::sum_to(g, shape), dtype);
}

using Grads = std::vector<Tensor>;

}  // namespace lockstep::autograd
