// clamp_min and clamp_max with a tensor bound (broadcast with the input, promoted as maximum's), as
// torch.clamp_min(x, t): NaN in either propagates. The gradient goes to the input where it is kept
// (x >= min; x <= max) and to the bound where the bound is taken, never split on ties, as PyTorch's.
#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
using autograd::reduce_grad;
namespace in = internal;

namespace {

Tensor clamp_bound(const Tensor& a, const Tensor& bound, bool is_min, const char* op) {
  LOCKSTEP_CHECK(a.defined() && bound.defined(), op, ": got an undefined tensor");
  in::broadcast_shapes(a.shape(), bound.shape(), op);
  in::check_same_device(a, bound, op);
  Tensor out = in::binary(is_min ? BinaryOp::Maximum : BinaryOp::Minimum, a, bound);
  if (!any_requires_grad(a, bound)) return out;
  Tensor to_a = in::binary(is_min ? BinaryOp::Ge : BinaryOp::Le, a, bound);
  Tensor to_bound = in::binary(is_min ? BinaryOp::Lt : BinaryOp::Gt, a, bound);
  return record(op, out, {a, bound},
                [to_a, to_bound, as = a.shape(), ad = a.dtype(), bs = bound.shape(), bd = bound.dtype()](
                    const Tensor& g) {
                  Tensor zero = zeros({}, {g.dtype(), g.device()});
                  return Grads{reduce_grad(in::where(to_a, g, zero), as, ad),
                               reduce_grad(in::where(to_bound, g, zero), bs, bd)};
                });
}

}  // namespace

Tensor clamp_min(const Tensor& a, const Tensor& min) { return clamp_bound(a, min, true, "clamp_min"); }
Tensor clamp_max(const Tensor& a, const Tensor& max) { return clamp_bound(a, max, false, "clamp_max"); }

}  // namespace lockstep
