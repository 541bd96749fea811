// LayerNorm in the ops layer, forward and backward: checks and contiguous operands for the backend's
// fused LayerNorm kernels. Both backends take bfloat16 and float16 rows as they are (computed in
// float32, with float32 mean and rstd); a float32 weight or bias beside a 16-bit input is given to them
// in the input's dtype.
#include <cmath>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

LayerNormResult layer_norm(const Tensor& x_in, int64_t n, const Tensor& weight, const Tensor& bias, double eps) {
  check_defined(x_in, "layer_norm");
  check_floating(x_in, "layer_norm");
  LOCKSTEP_CHECK(n > 0 && x_in.numel() % n == 0, "layer_norm: input ", x_in.shape(),
                 " does not divide into groups of ", n, " elements");
  LOCKSTEP_CHECK(eps >= 0, "layer_norm: eps must be non-negative, got ", eps);
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    LOCKSTEP_CHECK(t->numel() == n, "layer_norm: weight/bias ", t->shape(), " must hold ", n, " elements");
    check_same_device(x_in, *t, "layer_norm");
    LOCKSTEP_CHECK(!is_reduced_floating_point(t->dtype()) || !is_reduced_floating_point(x_in.dtype()) ||
                       t->dtype() == x_in.dtype(),
                   "layer_norm: weight/bias of dtype ", t->dtype(), " for a ", x_in.dtype(), " input (expected ",
                   x_in.dtype(), " or float32)");
  }
  auto same = [&](const Tensor& t) { return t.defined() ? contiguous(to_dtype(t, x_in.dtype())) : t; };
  Tensor x = contiguous(x_in), w = same(weight), b = same(bias);
  const int64_t rows = x.numel() / n;
  const Dtype stats = is_reduced_floating_point(x.dtype()) ? kFloat32 : x.dtype();
  LayerNormResult r{Tensor(x_in.shape(), x.dtype(), x.device()), Tensor(Shape{rows}, stats, x.device()),
                    Tensor(Shape{rows}, stats, x.device())};
  backend_for(x.device()).layer_norm(r.y, r.mean, r.rstd, x, w, b, rows, n, eps);
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& grad_y, const Tensor& x_in, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, int64_t n, bool want_x, bool want_weight, bool want_bias) {
  LOCKSTEP_CHECK(grad_y.shape() == x_in.shape(), "layer_norm_backward: gradient ", grad_y.shape(),
                 " does not match input ", x_in.shape());
  Tensor x = contiguous(x_in), gy = contiguous(to_dtype(grad_y, x.dtype()));
  Tensor w = weight.defined() ? contiguous(to_dtype(weight, x.dtype())) : weight;
  const int64_t rows = n ? x.numel() / n : 0;
  LayerNormGrads g;
  if (want_x) g.x = Tensor(x_in.shape(), x.dtype(), x.device());
  if (want_weight) g.weight = Tensor(weight.shape(), x.dtype(), x.device());
  if (want_bias) g.bias = Tensor(Shape{n}, x.dtype(), x.device());
  backend_for(x.device()).layer_norm_backward(g.x, g.weight, g.bias, gy, x, contiguous(mean), contiguous(rstd), w,
                                              rows, n);
  return g;
}

}  // namespace lockstep::internal
