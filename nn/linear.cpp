// Linear layer.
#include "nn/linear.h"

#include <cmath>
#include <ostream>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "nn/init.h"
#include "tensor/factory.h"

namespace lockstep::nn {

LinearImpl::LinearImpl(const LinearOptions& o)
    : Module("Linear"), options(o), in_features(o.in_features()), out_features(o.out_features()) {
  LOCKSTEP_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be positive, got ",
                 in_features, " and ", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (o.bias()) bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) init::uniform_(bias, -init::fan_in_bound(weight), init::fan_in_bound(weight));
}

Tensor LinearImpl::forward(const Tensor& x) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_features, "Linear(", in_features, ", ",
                 out_features, "): expected input [..., ", in_features, "], got ", x.defined() ? x.shape() : Shape{});
  // The dtypes as linear computes them: after autocast's cast (none outside autocast), so that a bfloat16
  // activation meeting float32 weights under autocast passes and a float64 one does not.
  const auto [xc, wc] = autograd::amp::cast_inputs(autograd::amp::AutocastOp::Linear, x, weight);
  if (xc.dtype() != wc.dtype()) {
    fail("Linear(", in_features, ", ", out_features, "): expected a ", wc.dtype(), " input, got ", xc.dtype(),
         " (convert the input with .to(", dtype_constant(wc.dtype()), ")",
         is_floating_point(xc.dtype()) ? std::string(", or the layer with .to(") + dtype_constant(xc.dtype()) + ")"
                                       : std::string(),
         ")");
  }
  LOCKSTEP_CHECK(x.device() == weight.device(), "Linear(", in_features, ", ", out_features, "): input on ", x.device(),
                 " but the layer on ", weight.device(), " (move one with .to(device))");
  return linear(xc, wc, bias);  // the casts made here: linear's own find them in their dtype
}

void LinearImpl::pretty_print(std::ostream& os) const {
  os << "Linear(in_features=" << in_features << ", out_features=" << out_features
     << ", bias=" << (bias.defined() ? "true" : "false") << ")";
}

}  // namespace lockstep::nn
