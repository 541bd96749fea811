// Linear layer.
#include "nn/linear.h"

#include <cmath>
#include <string>

#include "autograd/functions.h"
#include "tensor/factory.h"

namespace lockstep::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, Dtype dtype, Device device)
    : Module("Linear"), in_features(in), out_features(out) {
  LOCKSTEP_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in, " and ", out);
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", uniform({out, in}, -bound, bound, {dtype, device}));
  if (with_bias) bias = register_parameter("bias", uniform({out}, -bound, bound, {dtype, device}));
}

Tensor Linear::forward(const Tensor& x) {
  LOCKSTEP_CHECK(x.defined() && x.dim() == 2 && x.size(1) == in_features, "Linear(", in_features, ", ", out_features,
                 "): expected input [N, ", in_features, "], got ", x.defined() ? x.shape() : Shape{});
  if (x.dtype() != weight.dtype()) {
    // The constant's name: kFloat32, kFloat64, kInt64.
    auto k = [](Dtype d) { return std::string(d == kFloat32 ? "kFloat32" : d == kFloat64 ? "kFloat64" : "kInt64"); };
    fail("Linear(", in_features, ", ", out_features, "): expected a ", weight.dtype(), " input, got ", x.dtype(),
         " (convert the input with .to(", k(weight.dtype()), ")",
         is_floating_point(x.dtype()) ? ", or the layer with .to(" + k(x.dtype()) + ")" : std::string(), ")");
  }
  LOCKSTEP_CHECK(x.device() == weight.device(), "Linear(", in_features, ", ", out_features, "): input on ", x.device(),
                 " but the layer on ", weight.device(), " (move one with .to(device))");
  return linear(x, weight, bias);
}

}  // namespace lockstep::nn
