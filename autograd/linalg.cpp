// Differentiable matrix products, the NLL loss and conversions.
#include "autograd/autocast.h"
#include "autograd/autograd_util.h"
#include "autograd/functions.h"
#include "autograd/gelu_linear.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
namespace in = internal;
namespace amp = autograd::amp;
using amp::AutocastOp;

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const auto ab = amp::cast_inputs(AutocastOp::Matmul, a_in, b_in);
  const Tensor &a = ab[0], &b = ab[1];
  Tensor out = in::matmul(a, b);
  if (!any_requires_grad(a, b)) return out;
  bool ra = a.requires_grad(), rb = b.requires_grad();
  return record("matmul", out, {a, b}, [a = a.detach(), b = b.detach(), ra, rb](const Tensor& g) {
    // With 1-D operands as matrices ([k] -> [1, k] for a, [k, 1] for b) and g shaped to match:
    // grad a = g @ b^T, grad b = a^T @ g (transposes are views: the GEMM reads them in place), each
    // summed over the batch dimensions its operand was broadcast along.
    Tensor a2 = a.dim() == 1 ? in::unsqueeze(a, 0) : a, b2 = b.dim() == 1 ? in::unsqueeze(b, 1) : b;
    Tensor g2 = g;
    if (a.dim() == 1) g2 = in::unsqueeze(g2, g2.dim() - (b.dim() == 1 ? 0 : 1));
    if (b.dim() == 1) g2 = in::unsqueeze(g2, g2.dim());
    Tensor ga, gb;
    if (ra) ga = in::reshape(in::sum_to(in::matmul(g2, in::transpose(b2, -1, -2)), a2.shape()), a.shape());
    if (rb) gb = in::reshape(in::sum_to(in::matmul(in::transpose(a2, -1, -2), g2), b2.shape()), b.shape());
    return Grads{ga, gb};
  });
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in) {
  LOCKSTEP_CHECK(x_in.defined() && w_in.defined(), "linear: got an undefined input or weight");
  const auto xwb = amp::cast_inputs(AutocastOp::Linear, x_in, w_in, bias_in);
  const Tensor &x = xwb[0], &w = xwb[1], &bias = xwb[2];
  LOCKSTEP_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1), "linear: input ", x.shape(),
                 " does not match weight ", w.shape(), " (expected input [..., ", w.dim() == 2 ? w.size(1) : -1, "])");
  LOCKSTEP_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)), "linear: bias ", bias.shape(),
                 " does not match weight ", w.shape());
  LOCKSTEP_CHECK(x.dtype() == w.dtype(), "linear: input is ", x.dtype(), " but weight is ", w.dtype(),
                 " (convert one with .to(dtype))");
  LOCKSTEP_CHECK(x.device() == w.device(), "linear: input is on ", x.device(), " but weight is on ", w.device(),
                 " (move one with .to(device))");
  // x: [..., in] as [rows, in] (a view where the layout allows); w: [out, in]; one GEMM.
  Tensor x2 = in::reshape(x, {-1, w.size(1)});
  Tensor out2;
  if (bias.defined() && bias.dtype() == x.dtype() && bias.device() == x.device() && !is_reduced_floating_point(x.dtype())) {
    // The bias goes to the GEMM, which starts the rows from it (one pass over the output fewer than a
    // product followed by a bias add) or, for small products on a GPU, adds it in the same kernel.
    out2 = Tensor(Shape{x2.size(0), w.size(0)}, x.dtype(), x.device());
    in::gemm_(out2, x2, false, w, true, 1.0, 0.0, bias);
  } else {
    out2 = in::matmul(x2, w, false, true);  // [rows, out]
    if (bias.defined()) in::add_(out2, bias);
  }
  Shape out_shape = x.shape();
  out_shape.back() = w.size(0);
  Tensor out = in::view(out2, out_shape);
  const bool rb = bias.defined() && bias.requires_grad();
  if (!any_requires_grad(x, w) && !rb) return out;
  bool rx = x.requires_grad(), rw = w.requires_grad();
  return record("linear", out, {x, w, bias}, [x2 = x2.detach(), w = w.detach(), xs = x.shape(), rx, rw, rb](const Tensor& g) {
    Tensor g2 = in::reshape(g, {-1, w.size(0)});
    return Grads{rx ? in::reshape(in::matmul(g2, w), xs) : Tensor(),  // [rows, in]
                 rw ? in::matmul(g2, x2, true, false) : Tensor(),     // [out, in]
                 rb ? in::sum(g2, 0) : Tensor()};                     // [out]
  });
}

Tensor gelu_linear(const Tensor& x, const Tensor& w_in, const Tensor& bias_in, const std::string& approximate) {
  LOCKSTEP_CHECK(x.defined() && w_in.defined(), "gelu_linear: got an undefined input or weight");
  LOCKSTEP_CHECK(approximate == "none" || approximate == "tanh",
                 "gelu_linear: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  LOCKSTEP_CHECK(x.dim() >= 1 && w_in.dim() == 2 && x.size(-1) == w_in.size(1), "gelu_linear: input ", x.shape(),
                 " does not match weight ", w_in.shape(), " (expected input [..., ", w_in.dim() == 2 ? w_in.size(1) : -1,
                 "])");
  const UnaryOp op = approximate == "tanh" ? UnaryOp::GeluTanh : UnaryOp::Gelu;
  const BinaryOp op_backward = approximate == "tanh" ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward;
  Tensor out;
  Tensor w, bias;  // as linear casts them (autocast's cached casts of the parameters, in the graph)
  {
    Tensor a = in::unary(op, x);  // the GELU in x's dtype, as gelu(x) would run it
    const auto awb = amp::cast_inputs(AutocastOp::Linear, a, w_in, bias_in);
    w = awb[1], bias = awb[2];
    NoGradGuard no_grad;  // the product's values only: the graph is the one node below
    out = linear(awb[0], w, bias);
  }
  const bool rx = x.requires_grad(), rw = w.requires_grad(), rb = bias.defined() && bias.requires_grad();
  if (!GradMode::is_enabled() || !(rx || rw || rb)) return out;
  return record("gelu_linear", out, {x, w, bias},
                [x = x.detach(), w = w.detach(), op, op_backward, rx, rw, rb](const Tensor& g) {
                  Tensor g2 = in::reshape(g, {-1, w.size(0)});  // [rows, out]
                  Tensor gx, gw;
                  if (rw) {
                    Tensor a = in::unary(op, x);  // gelu(x) again, cast as the forward cast it
                    gw = in::matmul(g2, in::reshape(in::to_dtype(a, w.dtype()), {-1, w.size(1)}), true, false);
                  }
                  if (rx) {
                    Tensor ga = in::to_dtype(in::reshape(in::matmul(g2, w), x.shape()), x.dtype());
                    gx = in::binary(op_backward, ga, x);
                  }
                  return Grads{gx, gw, rb ? in::sum(g2, 0) : Tensor()};
                });
}

Tensor nll_loss(const Tensor& logp, const Tensor& target) {
  Tensor out = in::nll_loss(logp, target);
  if (!any_requires_grad(logp)) return out;
  return record("nll_loss", out, {logp}, [logp = logp.detach(), target](const Tensor& g) {
    return Grads{in::nll_loss_backward(g, logp, target)};
  });
}

Tensor to(const Tensor& a, Device device) {
  if (a.device() == device) return a;
  Tensor out = in::to_device(a, device);
  if (!any_requires_grad(a)) return out;
  return record("to_device", out, {a}, [from = a.device()](const Tensor& g) { return Grads{in::to_device(g, from)}; });
}

Tensor to(const Tensor& a, Dtype dtype) {
  if (a.dtype() == dtype) return a;
  Tensor out = in::to_dtype(a, dtype);
  if (!any_requires_grad(a) || !is_floating_point(dtype)) return out;
  return record("to_dtype", out, {a}, [from = a.dtype()](const Tensor& g) { return Grads{in::to_dtype(g, from)}; });
}

Tensor clone(const Tensor& a) {
  Tensor out = in::clone(a);
  if (!any_requires_grad(a)) return out;
  return record("clone", out, {a}, [](const Tensor& g) { return Grads{g}; });
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) { return in::allclose(a, b, rtol, atol); }

}  // namespace lockstep
