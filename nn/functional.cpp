// Losses composed from differentiable ops.
#include "nn/functional.h"

namespace lockstep::nn::functional {

Tensor cross_entropy(const Tensor& input, const Tensor& target) {
  LOCKSTEP_CHECK(input.defined() && target.defined(), "cross_entropy: got an undefined tensor");
  LOCKSTEP_CHECK(input.dim() == 2, "cross_entropy: expected input [N, C], got ", input.shape());
  LOCKSTEP_CHECK(is_floating_point(input.dtype()), "cross_entropy: expected floating-point logits, got ", input.dtype());
  LOCKSTEP_CHECK(target.dtype() == kInt64, "cross_entropy: expected int64 class targets, got ", target.dtype());
  LOCKSTEP_CHECK(target.dim() == 1 && target.size(0) == input.size(0), "cross_entropy: target ", target.shape(),
                 " does not match input ", input.shape(), " (expected [", input.size(0), "])");
  LOCKSTEP_CHECK(input.device() == target.device(), "cross_entropy: devices differ: input on ", input.device(),
                 ", target on ", target.device());
  return lockstep::nll_loss(lockstep::log_softmax(input, 1), target);
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  LOCKSTEP_CHECK(input.defined() && target.defined(), "mse_loss: got an undefined tensor");
  LOCKSTEP_CHECK(input.shape() == target.shape(), "mse_loss: input ", input.shape(), " and target ", target.shape(),
                 " differ in shape");
  LOCKSTEP_CHECK(input.dtype() == target.dtype(), "mse_loss: input is ", input.dtype(), " but target is ",
                 target.dtype());
  LOCKSTEP_CHECK(input.device() == target.device(), "mse_loss: devices differ: input on ", input.device(),
                 ", target on ", target.device());
  Tensor d = input - target;
  return lockstep::mean(d * d);
}

}  // namespace lockstep::nn::functional
