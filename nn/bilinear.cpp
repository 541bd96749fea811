// Bilinear and F::bilinear: one matmul of input1 with the weight laid out as [in1, out in2], then a batched
// matmul with input2, so the gradients are the matmuls'.
#include "nn/bilinear.h"

#include <cmath>

#include "nn/init.h"
#include "tensor/factory.h"

namespace lockstep::nn {

namespace functional {

Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias) {
  LOCKSTEP_CHECK(x1.defined() && x2.defined() && weight.defined(), "bilinear(): got an undefined tensor");
  LOCKSTEP_CHECK(weight.dim() == 3, "bilinear(): expected weight [out, in1, in2], got ", weight.shape());
  LOCKSTEP_CHECK(x1.dim() == x2.dim() && x1.dim() >= 1, "bilinear(): input dimensions do not match: got ", x1.dim(),
                 " and ", x2.dim());
  for (int64_t d = 0; d + 1 < x1.dim(); ++d)
    LOCKSTEP_CHECK(x1.size(d) == x2.size(d), "bilinear(): input batch dimensions do not match at dim ", d, ": got ",
                   x1.size(d), " and ", x2.size(d));
  const int64_t out = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
  LOCKSTEP_CHECK(x1.size(-1) == in1, "bilinear(): input1 size does not match weight size: got ", x1.size(-1),
                 " but expected ", in1);
  LOCKSTEP_CHECK(x2.size(-1) == in2, "bilinear(): input2 size does not match weight size: got ", x2.size(-1),
                 " but expected ", in2);
  LOCKSTEP_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out),
                 "bilinear(): bias size does not match weight size: got ",
                 bias.defined() ? bias.size(-1) : 0, " but expected ", out);
  Shape lead(x1.shape().begin(), x1.shape().end() - 1);
  int64_t b = 1;
  for (int64_t s : lead) b *= s;
  // x1 [B, in1] @ weight as [in1, out in2] -> [B, out, in2] @ x2 [B, in2, 1] -> [B, out]
  Tensor w = reshape(permute(weight, {1, 0, 2}), {in1, out * in2});
  Tensor t = reshape(matmul(reshape(x1, {b, in1}), w), {b, out, in2});
  Tensor y = matmul(t, reshape(x2, {b, in2, 1}));
  lead.push_back(out);
  y = reshape(y, lead);
  return bias.defined() ? add(y, bias) : y;
}

}  // namespace functional

BilinearImpl::BilinearImpl(const BilinearOptions& o) : Module("Bilinear"), options(o) {
  LOCKSTEP_CHECK(o.in1_features() > 0 && o.in2_features() > 0 && o.out_features() > 0,
                 "Bilinear: in1_features, in2_features and out_features must be positive, got ",
                 o.in1_features(), ", ", o.in2_features(), " and ", o.out_features());
  weight = register_parameter("weight", empty({o.out_features(), o.in1_features(), o.in2_features()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_features()}));
  reset_parameters();
}

void BilinearImpl::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(weight.size(1)));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

Tensor BilinearImpl::forward(const Tensor& input1, const Tensor& input2) {
  return functional::bilinear(input1, input2, weight, bias);
}

}  // namespace lockstep::nn
