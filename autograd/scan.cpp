// Differentiable scans, each forward beside its backward. The backward of a scan along a dimension is
// itself a scan from the other end (tensor/backend.h's reversed scan), so cumsum's is one reversed
// cumsum and logcumsumexp's two reversed logcumsumexps; cumprod's follows PyTorch's zero handling;
// cummax and cummin send the gradient to the positions their indices name.
#include <algorithm>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
namespace in = internal;

namespace {

Tensor scalar(double v, const Tensor& like) { return full({}, v, {like.dtype(), like.device()}); }

// The dimension a scan of `a` runs along (checked by in::scan first, with its message).
int64_t scan_dim(const Tensor& a, int64_t dim) { return dim < 0 ? dim + std::max<int64_t>(a.dim(), 1) : dim; }

Tensor reversed(Scan op, const Tensor& t, int64_t d) { return in::scan(op, t, d, std::nullopt, true).values; }

// PyTorch's cumprod_backward (the O(n) form it runs outside create_graph), by each column's first zero
// z: for k < z, d out_j / d x_k = out_j / x_k, so grad_k = sum_{j >= k} g_j out_j / x_k (out_j is 0 from
// z on); at z, out_j without its factor x_z is out_{z-1} prod_{z < i <= j} x_i, up to the next zero z2;
// after z every out_j holds x_z = 0 and another factor's derivative is 0. g is in x's dtype; out may be
// in another (cumprod's dtype argument), and is used as it is, as PyTorch does.
Tensor cumprod_backward(const Tensor& g, const Tensor& x, const Tensor& out, int64_t d) {
  if (x.numel() <= 1 || x.size(d) == 1) return g;
  const Tensor one = scalar(1, x), w = in::mul(g, out);  // w: promoted, when out has another dtype
  const Tensor zero = scalar(0, w), zero_g = scalar(0, g);
  const Tensor is_zero = in::binary_scalar(BinaryOp::Eq, x, 0.0);
  const Tensor zeros_so_far = in::scan(Scan::Cumsum, is_zero, d).values;  // int64
  const Tensor before = in::binary_scalar(BinaryOp::Eq, zeros_so_far, 0.0);
  const Tensor first_run = in::binary_scalar(BinaryOp::Eq, zeros_so_far, 1.0);  // [z, z2)
  const Tensor at_zero = in::binary(BinaryOp::LogicalAnd, is_zero, first_run);
  // k < z. Both wheres keep the positions from z on out of the sums and the division (inf * 0, 0 / 0).
  const Tensor tail = reversed(Scan::Cumsum, in::where(before, w, zero), d);
  const Tensor grad = in::where(before, in::div(tail, in::where(before, x, one)), zero);
  // k = z: the products of x over (z, j] for j < z2 (every other factor 1), weighted by g over [z, z2),
  // times out_{z-1}: the last of the running products of x before z, in out's order of multiplication.
  const Tensor after_zero = in::binary(BinaryOp::LogicalAnd, first_run, in::binary_scalar(BinaryOp::Eq, is_zero, 0.0));
  const Tensor runs = in::scan(Scan::Cumprod, in::where(after_zero, x, one), d).values;
  const Tensor sums = in::sum(in::mul(runs, in::where(first_run, g, zero_g)), d, true);
  const int64_t n = x.size(d);
  const Tensor x_as_out = in::to_dtype(x, out.dtype());  // as the forward multiplied it
  const Tensor out_before =
      in::narrow(in::scan(Scan::Cumprod, in::where(before, x_as_out, scalar(1, out)), d).values, d, n - 1, 1);
  return in::to_dtype(in::where(at_zero, in::mul(sums, out_before), grad), x.dtype());
}

// PyTorch's logcumsumexp_backward: grad_k = sum_{j >= k} g_j exp(x_k - out_j), the positive and the
// negative g_j apart, each a reversed logcumsumexp of log|g_j| - out_j (the dtype's lowest where g_j has
// the other sign or is 0, as PyTorch, so that no -inf - -inf appears).
Tensor logcumsumexp_backward(const Tensor& g, const Tensor& x, const Tensor& out, int64_t d) {
  if (g.dim() == 0 || g.numel() == 0) return g;
  double lowest = -std::numeric_limits<double>::max();
  if (g.dtype() == kFloat32) lowest = -std::numeric_limits<float>::max();
  else if (g.dtype() == kBFloat16) lowest = -0x1.fep127;  // bfloat16's largest finite value, negated
  else if (g.dtype() == kFloat16) lowest = -65504.0;
  const Tensor floor = scalar(lowest, g), log_abs = in::log(in::abs(g));
  auto part = [&](BinaryOp sign) {
    const Tensor log_g = in::where(in::binary_scalar(sign, g, 0.0), log_abs, floor);
    return in::exp(in::add(reversed(Scan::Logcumsumexp, in::sub(log_g, out), d), x));
  };
  return in::sub(part(BinaryOp::Gt), part(BinaryOp::Lt));
}

std::tuple<Tensor, Tensor> running_extreme(const Tensor& a, int64_t dim, Scan op) {
  in::ScanResult r = in::scan(op, a, dim);
  if (!any_requires_grad(a)) return {r.values, r.indices};
  const int64_t d = scan_dim(a, dim);
  Tensor values = record(scan_name(op), r.values, {a}, [s = a.shape(), idx = r.indices, d](const Tensor& g) {
    if (s.empty()) return Grads{g};
    Tensor ga = zeros(s, {g.dtype(), g.device()});
    if (ga.numel() > 0) in::scatter_add_(ga, d, idx, g);
    return Grads{ga};
  });
  return {values, r.indices};
}

}  // namespace

// With a `dtype`, the gradient is converted back to a's dtype first and scanned in it, as PyTorch's
// (not rounded to `dtype` on the way).
Tensor cumsum(const Tensor& a_in, int64_t dim, std::optional<Dtype> dtype) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Sum, a_in);
  Tensor out = in::scan(Scan::Cumsum, a, dim, dtype).values;
  if (!any_requires_grad(a) || !out.is_floating_point()) return out;
  return record("cumsum", out, {a}, [d = scan_dim(a, dim), dt = a.dtype()](const Tensor& g) {
    return Grads{reversed(Scan::Cumsum, in::to_dtype(g, dt), d)};
  });
}

Tensor cumprod(const Tensor& a_in, int64_t dim, std::optional<Dtype> dtype) {
  const Tensor a = autograd::amp::cast_input(autograd::amp::AutocastOp::Sum, a_in);
  Tensor out = in::scan(Scan::Cumprod, a, dim, dtype).values;
  if (!any_requires_grad(a) || !out.is_floating_point()) return out;
  return record("cumprod", out, {a}, [a = a.detach(), out = out.detach(), d = scan_dim(a, dim)](const Tensor& g) {
    return Grads{cumprod_backward(in::to_dtype(g, a.dtype()), a, out, d)};
  }, autograd::Output::Saved);
}

Tensor logcumsumexp(const Tensor& a, int64_t dim) {
  Tensor out = in::scan(Scan::Logcumsumexp, a, dim).values;
  if (!any_requires_grad(a)) return out;
  return record("logcumsumexp", out, {a}, [a = a.detach(), out = out.detach(), d = scan_dim(a, dim)](const Tensor& g) {
    return Grads{logcumsumexp_backward(g, a, out, d)};
  }, autograd::Output::Saved);
}

std::tuple<Tensor, Tensor> cummax(const Tensor& a, int64_t dim) { return running_extreme(a, dim, Scan::Cummax); }
std::tuple<Tensor, Tensor> cummin(const Tensor& a, int64_t dim) { return running_extreme(a, dim, Scan::Cummin); }

}  // namespace lockstep
