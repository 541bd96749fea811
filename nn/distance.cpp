// cosine_similarity, pairwise_distance and normalize, composed from the differentiable ops. Their norms are
// PyTorch's vector norm, whose gradient at a zero vector is 0 (lockstep::norm's sqrt would give NaN there):
// normalize and cosine_similarity meet zero vectors by design, through their eps.
#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "nn/distance.h"

namespace lockstep::nn::functional {

namespace {

Tensor norm_along(const Tensor& x, double p, int64_t dim, bool keepdim) {
  if (p == 0) {  // a count: no gradient, as PyTorch's is 0
    NoGradGuard no_grad;
    return sum(to(x.detach() != 0.0, x.dtype()), dim, keepdim);
  }
  if (std::isinf(p)) return p > 0 ? amax(abs(x), {dim}, keepdim) : amin(abs(x), {dim}, keepdim);
  if (p == 1) return sum(abs(x), dim, keepdim);
  Tensor s = p == 2 ? sum(x * x, dim, keepdim) : sum(pow(abs(x), p), dim, keepdim);
  // The root read at 1 where the sum is 0, so its infinite slope there never multiplies a zero gradient.
  Tensor nonzero = s != 0.0;
  Tensor safe = where(nonzero, s, 1.0);
  return where(nonzero, p == 2 ? sqrt(safe) : pow(safe, 1.0 / p), 0.0);
}

int64_t dim_of(const char* fn, int64_t dim, const Shape& shape) {
  const int64_t n = static_cast<int64_t>(shape.size());
  LOCKSTEP_CHECK(dim >= -n && dim < n, fn, ": dim ", dim, " is out of range for shape ", shape,
                 " (expected to be in range of [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

}  // namespace

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, const CosineSimilarityOptions& o) {
  const Shape shape = detail::check_broadcast("cosine_similarity", "x1", x1, "x2", x2);
  const int64_t dim = dim_of("cosine_similarity", o.dim(), shape);
  Tensor a = x1.shape() == shape ? x1 : expand(x1, shape);
  Tensor b = x2.shape() == shape ? x2 : expand(x2, shape);
  Tensor na = detail::clamp_min_keeping_grad(norm_along(a, 2, dim, true), o.eps());
  Tensor nb = detail::clamp_min_keeping_grad(norm_along(b, 2, dim, true), o.eps());
  return sum((a / na) * (b / nb), dim);
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, const PairwiseDistanceOptions& o) {
  detail::check_broadcast("pairwise_distance", "x1", x1, "x2", x2);
  const int64_t rank = std::max(x1.dim(), x2.dim());
  Tensor d = x1 - x2 + o.eps();
  // Scalars: torch's norm over dimension -1 of a 0-d tensor is its absolute value, 0-d whatever keepdim.
  if (rank == 0) return reshape(norm_along(reshape(d, {1}), o.p(), 0, false), {});
  return norm_along(d, o.p(), rank - 1, o.keepdim());
}

Tensor pdist(const Tensor& input, double p) {
  LOCKSTEP_CHECK(input.defined() && input.dim() == 2, "pdist only supports 2D tensors, got: ",
                 input.defined() ? input.dim() : 0, "D");
  LOCKSTEP_CHECK(p >= 0, "pdist only supports non-negative p values, got ", p);
  const int64_t n = input.size(0);
  if (n < 2) return zeros({0}, {input.dtype(), input.device()});
  // Rows i and j of every pair above the diagonal, then their distance.
  Tensor pairs = to(triu_indices(n, n, 1), input.device());  // [2, n (n - 1) / 2]
  return pairwise_distance(index_select(input, 0, pairs.select(0, 0)), index_select(input, 0, pairs.select(0, 1)),
                           PairwiseDistanceOptions().p(p).eps(0));
}

Tensor normalize(const Tensor& input, const NormalizeFuncOptions& o) {
  LOCKSTEP_CHECK(input.defined(), "normalize: got an undefined input");
  LOCKSTEP_CHECK(is_floating_point(input.dtype()), "normalize: expected a floating-point input, got ", input.dtype());
  const int64_t dim = dim_of("normalize", o.dim(), input.shape());
  return input / clamp(norm_along(input, o.p(), dim, true), o.eps());
}

}  // namespace lockstep::nn::functional
