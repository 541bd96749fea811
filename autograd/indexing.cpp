// Differentiable indexing: the gradient of a gather is a scatter into zeros, and the other way round.
#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
namespace in = internal;

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  Tensor out = in::index_select(a, dim, index);
  if (!any_requires_grad(a)) return out;
  return record("index_select", out, {a}, [s = a.shape(), dim, index](const Tensor& g) {
    Tensor ga = zeros(s, {g.dtype(), g.device()});
    in::index_add_(ga, dim, index, g);
    return Grads{ga};
  });
}

Tensor index_select(const Tensor& a, const Tensor& index) { return index_select(a, 0, index); }

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  Tensor out = in::gather(a, dim, index);
  if (!any_requires_grad(a)) return out;
  return record("gather", out, {a}, [s = a.shape(), dim, index](const Tensor& g) {
    Tensor ga = zeros(s, {g.dtype(), g.device()});
    in::scatter_add_(ga, dim, index, g);
    return Grads{ga};
  });
}

Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = in::clone(a);
  in::scatter_add_(out, dim, index, src);
  if (!any_requires_grad(a, src)) return out;
  return record("scatter_add", out, {a, src}, [dim, index, ss = src.shape()](const Tensor& g) {
    Tensor gs = in::gather(g, dim, index);
    if (gs.shape() != ss) {  // src larger than index: the elements beyond it were not used
      Tensor full = zeros(ss, {g.dtype(), g.device()});
      Tensor part = full;
      for (int64_t k = 0; k < gs.dim(); ++k) part = in::narrow(part, k, 0, gs.shape()[k]);
      in::copy_(part, gs);
      gs = full;
    }
    return Grads{g, gs};
  });
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = in::clone(a);
  in::index_add_(out, dim, index, src);
  if (!any_requires_grad(a, src)) return out;
  return record("index_add", out, {a, src}, [dim, index](const Tensor& g) {
    return Grads{g, in::index_select(g, dim, index)};
  });
}

namespace {
// values = a's elements at `indices` along dim (sort, topk): the gradient goes back to those positions.
Tensor picked_along(const char* name, const Tensor& values, const Tensor& a, int64_t dim, const Tensor& indices) {
  const int64_t d = in::wrap_dim(dim, std::max<int64_t>(a.dim(), 1), name);
  return record(name, values, {a}, [s = a.shape(), d, indices](const Tensor& g) {
    if (s.empty()) return Grads{g};
    Tensor ga = zeros(s, {g.dtype(), g.device()});
    in::scatter_add_(ga, d, indices, g);
    return Grads{ga};
  });
}
}  // namespace

std::pair<Tensor, Tensor> sort(const Tensor& a, int64_t dim, bool descending) {
  auto [values, indices] = in::sort(a, dim, descending);
  if (!any_requires_grad(a)) return {values, indices};
  return {picked_along("sort", values, a, dim, indices), indices};
}

Tensor argsort(const Tensor& a, int64_t dim, bool descending) {
  LOCKSTEP_CHECK(a.defined(), "argsort: got an undefined tensor");
  in::wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "argsort");
  return in::sort(a, dim, descending).second;
}

std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest) {
  auto [values, indices] = in::topk(a, k, dim, largest);
  if (!any_requires_grad(a)) return {values, indices};
  return {picked_along("topk", values, a, dim, indices), indices};
}

}  // namespace lockstep
