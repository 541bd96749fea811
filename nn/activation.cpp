// PReLU's parameter (its function, like every activation's, is in autograd/activation.cpp), and
// gumbel_softmax, a composition over a random draw.
#include "nn/activation.h"

#include "common/check.h"
#include "tensor/factory.h"

namespace lockstep::nn {

Tensor functional::gumbel_softmax(const Tensor& logits, const GumbelSoftmaxFuncOptions& o) {
  LOCKSTEP_CHECK(logits.defined() && logits.is_floating_point(), "gumbel_softmax: expected floating-point logits, got ",
                 logits.defined() ? dtype_name(logits.dtype()) : "undefined");
  LOCKSTEP_CHECK(o.tau() > 0, "gumbel_softmax: tau must be positive, got ", o.tau());
  // -log(E), E ~ Exponential(1) = -log(U): Gumbel(0, 1) noise, U kept away from 0 and 1.
  Tensor u = clamp(rand_like(logits.detach()), 1e-20, 1.0 - 1e-7);
  Tensor gumbels = neg(log(neg(log(u))));
  Tensor y = lockstep::softmax((logits + gumbels) / o.tau(), o.dim());
  if (!o.hard()) return y;
  // The one-hot of the argmax, with y's gradient: y_hard - y.detach() + y.
  Tensor index = argmax(y.detach(), o.dim(), /*keepdim=*/true);
  Tensor hard = zeros_like(y.detach()).scatter(o.dim(), index, 1.0);
  return hard - y.detach() + y;
}

PReLUImpl::PReLUImpl(const PReLUOptions& options) : Module("PReLU"), options(options) {
  LOCKSTEP_CHECK(options.num_parameters() >= 1, "PReLU: num_parameters must be at least 1, got ",
                 options.num_parameters());
  weight = register_parameter("weight", full({options.num_parameters()}, options.init()));
}

}  // namespace lockstep::nn
