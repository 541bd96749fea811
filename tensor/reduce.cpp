// Reductions, softmax and the NLL loss in the ops layer: argument checks, the [outer, n, inner] view
// the kernels take (made contiguous first), and reductions over several dimensions.
#include <algorithm>
#include <cmath>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

void check_floating(const Tensor& a, const char* op) {
  LOCKSTEP_CHECK(is_floating_point(a.dtype()), op, ": expected a floating-point tensor, got ", a.dtype());
}

}  // namespace

// One dimension: `a` as [outer, n, inner], reduced over n. The row's dtype rule, output dtype and empty
// value come from tensor/reduce_ops.h.
Tensor reduce(Reduction op, const Tensor& a_in, int64_t dim, bool keepdim, const char* name) {
  check_defined(a_in, name);
  const ReductionInfo info = reduction_info(op);
  if (info.dtypes == OpDtypes::kFloating) check_floating(a_in, name);
  // A sum (product) of bools counts (ands) them in int64, as PyTorch.
  if (a_in.dtype() == kBool && info.dtypes == OpDtypes::kNumeric)
    return reduce(op, to_dtype(a_in, kInt64), dim, keepdim, name);
  if (a_in.dtype() == kBFloat16) {
    Tensor r = reduce(op, to_dtype(a_in, kFloat32), dim, keepdim, name);
    return info.index ? r : to_dtype(r, kBFloat16);
  }
  // A 0-D tensor reduces over its one element along "dimension 0", as PyTorch allows.
  Tensor a = a_in.dim() == 0 ? view(a_in, {1}) : contiguous(a_in);
  const int64_t d = wrap_dim(dim, a.dim(), name);
  int64_t outer, n, inner;
  split_dim(a.shape(), d, outer, n, inner);
  LOCKSTEP_CHECK(n > 0 || info.empty_ok, name, ": cannot reduce an empty dimension ", dim, " of shape ",
                 a_in.shape());
  Shape s = a.shape();
  if (keepdim && a_in.dim() > 0) s[d] = 1;
  else s.erase(s.begin() + d);
  Tensor out(s, info.index ? kInt64 : a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (n == 0) fill_(out, info.empty_value);  // as PyTorch: an empty sum is 0, mean NaN, prod 1
  else backend_for(a.device()).reduce(op, out, a, outer, n, inner);
  return out;
}

std::vector<int64_t> reduction_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, std::max<int64_t>(ndim, 1), op));
  std::sort(out.begin(), out.end());
  LOCKSTEP_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dimension repeated in ", dims);
  return out;
}

Shape kept_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape s = shape;
  for (int64_t d : dims)
    if (d < static_cast<int64_t>(s.size())) s[d] = 1;
  return s;
}

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims_in, bool keepdim) {
  check_defined(a, "sum");
  std::vector<int64_t> dims = reduction_dims(dims_in, a.dim(), "sum");
  if (a.dim() == 0) return reduce(Reduction::Sum, a, 0, keepdim, "sum");
  // Every dimension reduced: one flat reduction.
  if (static_cast<int64_t>(dims.size()) == a.dim() && !keepdim)
    return reduce(Reduction::Sum, reshape(a, {a.numel()}), 0, false, "sum");
  Tensor r = a;
  for (size_t i = dims.size(); i-- > 0;) r = reduce(Reduction::Sum, r, dims[i], true, "sum");
  return keepdim ? r : reshape(r, [&] {
    Shape s;
    for (int64_t d = 0; d < a.dim(); ++d)
      if (!std::binary_search(dims.begin(), dims.end(), d)) s.push_back(a.shape()[d]);
    return s;
  }());
}

Tensor sum(const Tensor& a) { return sum(a, std::vector<int64_t>{}, false); }
Tensor sum(const Tensor& a, int64_t dim, bool keepdim) { return reduce(Reduction::Sum, a, dim, keepdim, "sum"); }
Tensor mean(const Tensor& a) {
  check_defined(a, "mean");
  check_floating(a, "mean");
  return reduce(Reduction::Mean, reshape(a, {a.numel()}), 0, false, "mean");
}
Tensor mean(const Tensor& a, int64_t dim, bool keepdim) { return reduce(Reduction::Mean, a, dim, keepdim, "mean"); }
Tensor prod(const Tensor& a) {
  check_defined(a, "prod");
  return reduce(Reduction::Prod, reshape(a, {a.numel()}), 0, false, "prod");
}
Tensor prod(const Tensor& a, int64_t dim, bool keepdim) { return reduce(Reduction::Prod, a, dim, keepdim, "prod"); }
Tensor max(const Tensor& a, int64_t dim, bool keepdim) { return reduce(Reduction::Max, a, dim, keepdim, "max"); }
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return reduce(Reduction::Argmax, a, dim, keepdim, "argmax");
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  LOCKSTEP_CHECK(a.dim() >= static_cast<int64_t>(shape.size()) &&
                     broadcast_shapes(a.shape(), shape, "sum_to") == a.shape(),
                 "sum_to: cannot sum ", a.shape(), " down to ", shape);
  const int64_t lead = a.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && a.shape()[d] != 1)) dims.push_back(d);
  if (dims.empty()) return reshape(a, shape);
  return reshape(sum(a, dims, true), shape);
}

// --- softmax and loss ----------------------------------------------------------------------------

Tensor softmax(const Tensor& a_in, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(a_in, name);
  check_floating(a_in, name);
  if (a_in.dtype() == kBFloat16) return to_dtype(softmax(to_dtype(a_in, kFloat32), dim, log), kBFloat16);
  Tensor a = contiguous(a_in.dim() == 0 ? view(a_in, {1}) : a_in);
  int64_t d = wrap_dim(dim, a.dim(), name), outer, n, inner;
  split_dim(a.shape(), d, outer, n, inner);
  Tensor out(a_in.shape(), a.dtype(), a.device());
  if (out.numel()) backend_for(a.device()).softmax(out, a, outer, n, inner, log);
  return out;
}

Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax(a, dim, true); }

Tensor softmax_backward(const Tensor& grad_out, const Tensor& output, int64_t dim, bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  LOCKSTEP_CHECK(grad_out.shape() == output.shape(), name, ": gradient ", grad_out.shape(), " does not match output ",
                 output.shape());
  if (output.dtype() == kBFloat16)
    return to_dtype(softmax_backward(to_dtype(grad_out, kFloat32), to_dtype(output, kFloat32), dim, log), kBFloat16);
  Tensor g = contiguous(to_dtype(grad_out, output.dtype())), y = contiguous(output);
  if (y.dim() == 0) g = view(g, {1}), y = view(y, {1});
  int64_t d = wrap_dim(dim, y.dim(), name), outer, n, inner;
  split_dim(y.shape(), d, outer, n, inner);
  Tensor gi(output.shape(), y.dtype(), y.device());
  if (gi.numel()) backend_for(y.device()).softmax_backward(gi, g, y, outer, n, inner, log);
  return gi;
}

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
  }
  if (x_in.dtype() == kBFloat16) {
    auto f32 = [](const Tensor& t) { return t.defined() ? to_dtype(t, kFloat32) : t; };
    LayerNormResult r = layer_norm(f32(x_in), n, f32(weight), f32(bias), eps);
    r.y = to_dtype(r.y, kBFloat16);
    return r;
  }
  auto same = [&](const Tensor& t) { return t.defined() ? contiguous(to_dtype(t, x_in.dtype())) : t; };
  Tensor x = contiguous(x_in), w = same(weight), b = same(bias);
  const int64_t rows = x.numel() / n;
  LayerNormResult r{Tensor(x_in.shape(), x.dtype(), x.device()), Tensor(Shape{rows}, x.dtype(), x.device()),
                    Tensor(Shape{rows}, x.dtype(), x.device())};
  backend_for(x.device()).layer_norm(r.y, r.mean, r.rstd, x, w, b, rows, n, eps);
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& grad_y, const Tensor& x_in, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, int64_t n, bool want_x, bool want_weight, bool want_bias) {
  LOCKSTEP_CHECK(grad_y.shape() == x_in.shape(), "layer_norm_backward: gradient ", grad_y.shape(),
                 " does not match input ", x_in.shape());
  if (x_in.dtype() == kBFloat16) {
    auto f32 = [](const Tensor& t) { return t.defined() ? to_dtype(t, kFloat32) : t; };
    LayerNormGrads g = layer_norm_backward(f32(grad_y), f32(x_in), mean, rstd, f32(weight), n, want_x, want_weight,
                                           want_bias);
    for (Tensor* t : {&g.x, &g.weight, &g.bias})
      if (t->defined()) *t = to_dtype(*t, kBFloat16);
    return g;
  }
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
  if (logp_in.dtype() == kBFloat16) return to_dtype(nll_loss(to_dtype(logp_in, kFloat32), target, mean), kBFloat16);
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
  const Dtype dt = logp.dtype() == kBFloat16 ? kFloat32 : logp.dtype();
  Tensor g = zeros(logp.shape(), {dt, logp.device()});
  int64_t n = logp.size(0);
  if (n)
    backend_for(logp.device())
        .nll_loss_backward(g, contiguous(to_dtype(grad_out, dt)), contiguous(target), mean ? 1.0 / n : 1.0);
  return to_dtype(g, logp.dtype());
}

MaxPoolResult max_pool2d(const Tensor& x_in, const MaxPool2dArgs& a) {
  check_defined(x_in, "max_pool2d");
  check_floating(x_in, "max_pool2d");
  LOCKSTEP_CHECK(x_in.dim() >= 2 && a.H == x_in.size(-2) && a.W == x_in.size(-1) &&
                     a.planes * a.H * a.W == x_in.numel(),
                 "max_pool2d: input ", x_in.shape(), " is not ", a.planes, " planes of ", a.H, "x", a.W);
  LOCKSTEP_CHECK(a.kh > 0 && a.kw > 0 && a.sh > 0 && a.sw > 0 && a.dh > 0 && a.dw > 0 && a.OH >= 0 && a.OW >= 0 &&
                     (a.OH == 0 || (a.OH - 1) * a.sh + (a.kh - 1) * a.dh < a.H) &&
                     (a.OW == 0 || (a.OW - 1) * a.sw + (a.kw - 1) * a.dw < a.W),
                 "max_pool2d: windows ", a.kh, "x", a.kw, " (stride ", a.sh, "x", a.sw, ", dilation ", a.dh, "x", a.dw,
                 ") for a ", a.OH, "x", a.OW, " output do not fit a ", a.H, "x", a.W, " input");
  if (x_in.dtype() == kBFloat16) {
    MaxPoolResult r = max_pool2d(to_dtype(x_in, kFloat32), a);
    return {to_dtype(r.out, kBFloat16), r.indices};
  }
  const Tensor x = contiguous(x_in);
  Shape s = x.shape();
  s[s.size() - 2] = a.OH;
  s[s.size() - 1] = a.OW;
  MaxPoolResult r{Tensor(s, x.dtype(), x.device()), Tensor(s, kInt64, x.device())};
  // (Indices are positions in x itself, so the backward is one index_add into x's shape.)
  if (r.out.numel() > 0) backend_for(x.device()).max_pool2d(r.out, r.indices, x, a);
  return r;
}

}  // namespace lockstep::internal
