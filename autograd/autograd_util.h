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

// A row of tensor/elementwise_ops.h whose gradient is another row, backward(g, saved) with the same
// scalars, `saved` being the input or (save_output) the output. The name is the row's.
inline Tensor unary_with(UnaryOp op, const Tensor& a, BinaryOp backward, bool save_output,
                         const OpScalars& params = {}) {
  Tensor out = internal::unary(op, a, params);
  if (!any_requires_grad(a)) return out;
  Tensor saved = save_output ? out.detach() : a.detach();
  return record(
      op_name(op), out, {a},
      [backward, saved, params](const Tensor& g) { return Grads{internal::binary(backward, g, saved, params)}; },
      save_output ? Output::Saved : Output::NotSaved);
}

}  // namespace lockstep::autograd
