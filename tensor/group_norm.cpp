// GroupNorm in the ops layer, forward and backward: checks and contiguous operands for the backend's
// fused GroupNorm kernels (tensor/backend.h), x [N, C, *] seen as [N, C, HW]. As LayerNorm's: both
// backends take bfloat16 and float16 inputs as they are (computed in float32, with float32 mean and
// rstd), and a float32 weight or bias beside a 16-bit input is given to them in the input's dtype.
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

struct Dims {
  int64_t N, C, HW;
};
Dims dims_of(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1);
  return {N, C, N * C > 0 ? x.numel() / (N * C) : 0};
}

}  // namespace

LayerNormResult group_norm(const Tensor& x_in, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  check_defined(x_in, "group_norm");
  check_floating(x_in, "group_norm");
  LOCKSTEP_CHECK(x_in.dim() >= 2, "group_norm: expected an input [N, C, *], got ", x_in.shape());
  const auto [N, C, HW] = dims_of(x_in);
  LOCKSTEP_CHECK(groups > 0 && C % groups == 0, "group_norm: ", C, " channels do not divide into ", groups,
                 " groups");
  LOCKSTEP_CHECK(eps >= 0, "group_norm: eps must be non-negative, got ", eps);
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    LOCKSTEP_CHECK(t->numel() == C, "group_norm: weight/bias ", t->shape(), " must hold ", C, " elements");
    check_same_device(x_in, *t, "group_norm");
    LOCKSTEP_CHECK(!is_reduced_floating_point(t->dtype()) || !is_reduced_floating_point(x_in.dtype()) ||
                       t->dtype() == x_in.dtype(),
                   "group_norm: weight/bias of dtype ", t->dtype(), " for a ", x_in.dtype(), " input (expected ",
                   x_in.dtype(), " or float32)");
  }
  auto same = [&](const Tensor& t) { return t.defined() ? contiguous(to_dtype(t, x_in.dtype())) : t; };
  Tensor x = contiguous(x_in), w = same(weight), b = same(bias);
  const Dtype stats = is_reduced_floating_point(x.dtype()) ? kFloat32 : x.dtype();
  LayerNormResult r{Tensor(x_in.shape(), x.dtype(), x.device()), Tensor(Shape{N, groups}, stats, x.device()),
                    Tensor(Shape{N, groups}, stats, x.device())};
  backend_for(x.device()).group_norm(r.y, r.mean, r.rstd, x, w, b, N, C, HW, groups, eps);
  return r;
}

LayerNormGrads group_norm_backward(const Tensor& grad_y, const Tensor& x_in, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, int64_t groups, bool want_x, bool want_weight,
                                   bool want_bias) {
  LOCKSTEP_CHECK(grad_y.shape() == x_in.shape(), "group_norm_backward: gradient ", grad_y.shape(),
                 " does not match input ", x_in.shape());
  Tensor x = contiguous(x_in), gy = contiguous(to_dtype(grad_y, x.dtype()));
  Tensor w = weight.defined() ? contiguous(to_dtype(weight, x.dtype())) : weight;
  const auto [N, C, HW] = dims_of(x);
  LayerNormGrads g;
  if (want_x) g.x = Tensor(x_in.shape(), x.dtype(), x.device());
  if (want_weight) g.weight = Tensor(Shape{C}, x.dtype(), x.device());
  if (want_bias) g.bias = Tensor(Shape{C}, x.dtype(), x.device());
  backend_for(x.device()).group_norm_backward(g.x, g.weight, g.bias, gy, x, contiguous(mean), contiguous(rstd), w, N,
                                              C, HW, groups);
  return g;
}

}  // namespace lockstep::internal
