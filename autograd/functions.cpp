// Differentiable ops: each forward is a raw op from tensor/ops.h, and its backward sits right below
// it as a lambda that captures only what the gradient needs.
#include "autograd/functions.h"

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep {

using autograd::record;

namespace {

template <typename... Ts>
bool any_requires_grad(const Ts&... ts) {
  return GradMode::is_enabled() && (ts.requires_grad() || ...);
}

// `g` broadcast up to `shape` (the gradient of a reduction).
Tensor expand(const Tensor& g, const Shape& shape) { return ops::add(zeros(shape, {g.dtype(), g.device()}), g); }

}  // namespace

// --- elementwise -------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = ops::add(a, b);
  if (!any_requires_grad(a, b)) return out;
  bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("add", out, {a, b}, [sa = a.shape(), sb = b.shape(), ra, rb](const Tensor& g) {
    return std::vector<Tensor>{ra ? ops::sum_to(g, sa) : Tensor(), rb ? ops::sum_to(g, sb) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = ops::sub(a, b);
  if (!any_requires_grad(a, b)) return out;
  bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("sub", out, {a, b}, [sa = a.shape(), sb = b.shape(), ra, rb](const Tensor& g) {
    return std::vector<Tensor>{ra ? ops::sum_to(g, sa) : Tensor(), rb ? ops::sum_to(ops::neg(g), sb) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = ops::mul(a, b);
  if (!any_requires_grad(a, b)) return out;
  bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("mul", out, {a, b}, [a = a.detach(), b = b.detach(), ra, rb](const Tensor& g) {
    return std::vector<Tensor>{ra ? ops::sum_to(ops::mul(g, b), a.shape()) : Tensor(),
                               rb ? ops::sum_to(ops::mul(g, a), b.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = ops::div(a, b);
  if (!any_requires_grad(a, b)) return out;
  bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("div", out, {a, b}, [sa = a.shape(), b = b.detach(), out = out.detach(), ra, rb](const Tensor& g) {
    Tensor gb;  // d(a/b)/db = -(a/b)/b
    if (rb) gb = ops::sum_to(ops::neg(ops::div(ops::mul(g, out), b)), b.shape());
    return std::vector<Tensor>{ra ? ops::sum_to(ops::div(g, b), sa) : Tensor(), gb};
  });
}

Tensor add(const Tensor& a, double s) {
  Tensor out = ops::add(a, s);
  if (!any_requires_grad(a)) return out;
  return record("add_scalar", out, {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = ops::mul(a, s);
  if (!any_requires_grad(a)) return out;
  return record("mul_scalar", out, {a}, [s](const Tensor& g) { return std::vector<Tensor>{ops::mul(g, s)}; });
}

Tensor rsub(const Tensor& a, double s) {
  Tensor out = ops::binary_scalar(BinaryOp::Sub, a, s, true);
  if (!any_requires_grad(a)) return out;
  return record("rsub", out, {a}, [](const Tensor& g) { return std::vector<Tensor>{ops::neg(g)}; });
}

Tensor rdiv(const Tensor& a, double s) {
  Tensor out = ops::binary_scalar(BinaryOp::Div, a, s, true);
  if (!any_requires_grad(a)) return out;
  return record("rdiv", out, {a}, [a = a.detach(), out = out.detach()](const Tensor& g) {
    return std::vector<Tensor>{ops::neg(ops::div(ops::mul(g, out), a))};
  });
}

Tensor neg(const Tensor& a) {
  Tensor out = ops::neg(a);
  if (!any_requires_grad(a)) return out;
  return record("neg", out, {a}, [](const Tensor& g) { return std::vector<Tensor>{ops::neg(g)}; });
}

Tensor exp(const Tensor& a) {
  Tensor out = ops::exp(a);
  if (!any_requires_grad(a)) return out;
  return record("exp", out, {a}, [out = out.detach()](const Tensor& g) { return std::vector<Tensor>{ops::mul(g, out)}; });
}

Tensor log(const Tensor& a) {
  Tensor out = ops::log(a);
  if (!any_requires_grad(a)) return out;
  return record("log", out, {a}, [a = a.detach()](const Tensor& g) { return std::vector<Tensor>{ops::div(g, a)}; });
}

Tensor relu(const Tensor& a) {
  Tensor out = ops::relu(a);
  if (!any_requires_grad(a)) return out;
  // The output is positive exactly where the input is, so only the output is kept.
  return record("relu", out, {a},
                [out = out.detach()](const Tensor& g) { return std::vector<Tensor>{ops::relu_backward(g, out)}; });
}

// --- matrix products and shapes --------------------------------------------------------------------

Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor out = ops::matmul(a, b);
  if (!any_requires_grad(a, b)) return out;
  bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("matmul", out, {a, b}, [a = a.detach(), b = b.detach(), ra, rb](const Tensor& g) {
    // g: [m, n]; grad a = g @ b^T, grad b = a^T @ g, both without materialising a transpose.
    return std::vector<Tensor>{ra ? ops::matmul(g, b, false, true) : Tensor(),
                               rb ? ops::matmul(a, g, true, false) : Tensor()};
  });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  LOCKSTEP_CHECK(x.defined() && w.defined(), "linear: got an undefined input or weight");
  LOCKSTEP_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "linear: input ", x.shape(),
                 " does not match weight ", w.shape(), " (expected input [N, ", w.dim() == 2 ? w.size(1) : -1, "])");
  LOCKSTEP_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)), "linear: bias ", bias.shape(),
                 " does not match weight ", w.shape());
  LOCKSTEP_CHECK(x.dtype() == w.dtype(), "linear: input is ", x.dtype(), " but weight is ", w.dtype(),
                 " (convert one with .to(dtype))");
  LOCKSTEP_CHECK(x.device() == w.device(), "linear: input is on ", x.device(), " but weight is on ", w.device(),
                 " (move one with .to(device))");
  Tensor out = ops::matmul(x, w, false, true);  // x: [B, in], w: [out, in] -> [B, out]
  if (bias.defined()) ops::add_(out, bias);
  if (!any_requires_grad(x, w) && !(bias.defined() && bias.requires_grad())) return out;
  bool rx = x.requires_grad(), rw = w.requires_grad(), rb = bias.defined() && bias.requires_grad();
  return record("linear", out, {x, w, bias}, [x = x.detach(), w = w.detach(), rx, rw, rb](const Tensor& g) {
    return std::vector<Tensor>{rx ? ops::matmul(g, w) : Tensor(),                // [B, in]
                               rw ? ops::matmul(g, x, true, false) : Tensor(),   // [out, in]
                               rb ? ops::sum(g, 0) : Tensor()};                  // [out]
  });
}

Tensor transpose(const Tensor& a) {
  Tensor out = ops::transpose(a);
  if (!any_requires_grad(a)) return out;
  return record("transpose", out, {a}, [](const Tensor& g) { return std::vector<Tensor>{ops::transpose(g)}; });
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  Tensor out = ops::reshape(a, shape);
  if (!any_requires_grad(a)) return out;
  return record("reshape", out, {a}, [s = a.shape()](const Tensor& g) { return std::vector<Tensor>{ops::reshape(g, s)}; });
}

// --- reductions ------------------------------------------------------------------------------------

Tensor sum(const Tensor& a) {
  Tensor out = ops::sum(a);
  if (!any_requires_grad(a)) return out;
  return record("sum", out, {a}, [s = a.shape()](const Tensor& g) { return std::vector<Tensor>{expand(g, s)}; });
}

Tensor sum(const Tensor& a, int64_t dim, bool keepdim) {
  Tensor out = ops::sum(a, dim, keepdim);
  if (!any_requires_grad(a)) return out;
  Shape kept = a.shape();
  kept[ops::wrap_dim(dim, a.dim(), "sum")] = 1;
  return record("sum_dim", out, {a}, [s = a.shape(), kept](const Tensor& g) {
    return std::vector<Tensor>{expand(ops::reshape(g, kept), s)};
  });
}

Tensor mean(const Tensor& a) {
  Tensor out = ops::mean(a);
  if (!any_requires_grad(a)) return out;
  return record("mean", out, {a}, [s = a.shape(), n = a.numel()](const Tensor& g) {
    return std::vector<Tensor>{expand(ops::mul(g, 1.0 / n), s)};
  });
}

Tensor mean(const Tensor& a, int64_t dim, bool keepdim) {
  Tensor out = ops::mean(a, dim, keepdim);
  if (!any_requires_grad(a)) return out;
  int64_t d = ops::wrap_dim(dim, a.dim(), "mean");
  Shape kept = a.shape();
  kept[d] = 1;
  return record("mean_dim", out, {a}, [s = a.shape(), kept, n = a.shape()[d]](const Tensor& g) {
    return std::vector<Tensor>{expand(ops::mul(ops::reshape(g, kept), 1.0 / n), s)};
  });
}

Tensor max(const Tensor& a, int64_t dim, bool keepdim) {
  Tensor out = ops::max(a, dim, keepdim);
  if (!any_requires_grad(a)) return out;
  int64_t d = ops::wrap_dim(dim, a.dim(), "max"), outer, n, inner;
  ops::split_dim(a.shape(), d, outer, n, inner);
  Tensor idx = ops::argmax(a, d);  // [outer * inner] positions along dim
  return record("max", out, {a}, [s = a.shape(), idx, outer, n, inner](const Tensor& g) {
    // The gradient goes to the maximum's flat position (o * n + idx) * inner + i.
    TensorOptions io(kInt64, g.device());
    Tensor base = ops::add(ops::reshape(ops::mul(arange(outer, io), double(n * inner)), {outer, 1}), arange(inner, io));
    Tensor flat = ops::add(base, ops::mul(ops::reshape(idx, {outer, inner}), double(inner)));
    Tensor grad = zeros({outer * n * inner, 1}, {g.dtype(), g.device()});
    ops::index_add_(grad, ops::reshape(flat, {-1}), ops::reshape(g, {-1, 1}));
    return std::vector<Tensor>{ops::reshape(grad, s)};
  });
}

// --- softmax, loss, indexing, conversion -------------------------------------------------------------

Tensor log_softmax(const Tensor& a, int64_t dim) {
  Tensor out = ops::log_softmax(a, dim);
  if (!any_requires_grad(a)) return out;
  return record("log_softmax", out, {a}, [out = out.detach(), dim](const Tensor& g) {
    return std::vector<Tensor>{ops::log_softmax_backward(g, out, dim)};
  });
}

Tensor nll_loss(const Tensor& logp, const Tensor& target) {
  Tensor out = ops::nll_loss(logp, target);
  if (!any_requires_grad(logp)) return out;
  return record("nll_loss", out, {logp}, [logp = logp.detach(), target](const Tensor& g) {
    return std::vector<Tensor>{ops::nll_loss_backward(g, logp, target)};
  });
}

Tensor index_select(const Tensor& a, const Tensor& index) {
  Tensor out = ops::index_select(a, index);
  if (!any_requires_grad(a)) return out;
  return record("index_select", out, {a}, [s = a.shape(), index](const Tensor& g) {
    Tensor grad = zeros(s, {g.dtype(), g.device()});
    ops::index_add_(grad, index, g);
    return std::vector<Tensor>{grad};
  });
}

Tensor to(const Tensor& a, Device device) {
  if (a.device() == device) return a;
  Tensor out = ops::to_device(a, device);
  if (!any_requires_grad(a)) return out;
  return record("to_device", out, {a}, [from = a.device()](const Tensor& g) {
    return std::vector<Tensor>{ops::to_device(g, from)};
  });
}

Tensor to(const Tensor& a, Dtype dtype) {
  if (a.dtype() == dtype) return a;
  Tensor out = ops::to_dtype(a, dtype);
  if (!any_requires_grad(a) || !is_floating_point(dtype)) return out;
  return record("to_dtype", out, {a}, [from = a.dtype()](const Tensor& g) {
    return std::vector<Tensor>{ops::to_dtype(g, from)};
  });
}

Tensor clone(const Tensor& a) {
  Tensor out = ops::clone(a);
  if (!any_requires_grad(a)) return out;
  return record("clone", out, {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

// --- operators ---------------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator+(double s, const Tensor& a) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }
Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }

}  // namespace lockstep
