// The NLL loss in the ops layer, forward and backward: checks of logp [N, C] and int64 targets [N]
// for the backend's fused kernels (which check each target's range). Both devices' kernels take 16-bit
// logp as it is: the picked values summed in double, the loss rounded once; the gradient's one value per
// row computed in double and rounded once.
#include <cmath>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

static void check_nll(const Tensor& logp, const Tensor& target, const char* op) {
  check_defined(logp, op);
  check_defined(target, op);
  check_floating(logp, op);
  LOCKSTEP_CHECK(logp.dim() == 2, op, ": expected input [N, C], got ", logp.shape());
  LOCKSTEP_CHECK(target.dtype() == kInt64, op, ": expected int64 class targets, got ", target.dtype());
  LOCKSTEP_CHECK(target.dim() == 1 && target.size(0) == logp.size(0), op, ": target ", target.shape(),
                 " does not match input ", logp.shape(), " (expected [", logp.size(0), "])");
  LOCKSTEP_CHECK(logp.device() == target.device(), op, ": input on ", logp.device(), " but target on ",
                 target.device());
}

Tensor nll_loss(const Tensor& logp_in, const Tensor& target, bool mean) {
  check_nll(logp_in, target, "nll_loss");
  Tensor logp = contiguous(logp_in), t = contiguous(target);
  Tensor out(Shape{}, logp.dtype(), logp.device());
  int64_t n = logp.size(0);
  if (n == 0) {
    fill_(out, mean ? NAN : 0.0);
    return out;
  }
  backend_for(logp.device()).nll_loss(out, logp, t, mean ? 1.0 / n : 1.0);
  return out;
}

Tensor nll_loss_backward(const Tensor& grad_out, const Tensor& logp, const Tensor& target, bool mean) {
  check_nll(logp, target, "nll_loss_backward");
  LOCKSTEP_CHECK(grad_out.numel() == 1, "nll_loss_backward: expected a one-element gradient, got ", grad_out.shape());
  const Dtype dt = logp.dtype();
  Tensor g = zeros(logp.shape(), {dt, logp.device()});
  int64_t n = logp.size(0);
  if (n)
    backend_for(logp.device())
        .nll_loss_backward(g, contiguous(to_dtype(grad_out, dt)), contiguous(target), mean ? 1.0 / n : 1.0);
  return g;
}

}  // namespace lockstep::internal
