// Distances between vectors, as torch.nn.functional.cosine_similarity, pairwise_distance and normalize,
// and the modules torch.nn.CosineSimilarity and PairwiseDistance; options as LibTorch's:
//   F::cosine_similarity(x1, x2, F::CosineSimilarityFuncOptions().dim(-1))
//   nn::PairwiseDistance dist(nn::PairwiseDistanceOptions().p(1).keepdim(true));
#pragma once

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

struct CosineSimilarityOptions {
  LOCKSTEP_ARG(int64_t, dim, 1);
  LOCKSTEP_ARG(double, eps, 1e-8);
};
struct PairwiseDistanceOptions {
  LOCKSTEP_ARG(double, p, 2.0);
  LOCKSTEP_ARG(double, eps, 1e-6);
  LOCKSTEP_ARG(bool, keepdim, false);
};

}  // namespace lockstep::nn

namespace lockstep::nn::functional {

using CosineSimilarityFuncOptions = CosineSimilarityOptions;
using PairwiseDistanceFuncOptions = PairwiseDistanceOptions;
struct NormalizeFuncOptions {
  LOCKSTEP_ARG(double, p, 2.0);
  LOCKSTEP_ARG(int64_t, dim, 1);
  LOCKSTEP_ARG(double, eps, 1e-12);
};

// x1 and x2 broadcast; sum(x1 x2) / (max(|x1|, eps) max(|x2|, eps)) along dim, each vector divided by its
// norm first (PyTorch's order, which keeps the result in [-1, 1]). The clamps guard the value only: the
// gradient passes as if unclamped, as PyTorch's in-place clamp under no_grad leaves it.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, const CosineSimilarityOptions& options = {});
// The p-norm of x1 - x2 + eps along the last dimension (of the broadcast shape): p > 0, inf and -inf (the
// largest and smallest |element|) and 0 (the count of non-zero elements, no gradient), as torch's norm.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, const PairwiseDistanceOptions& options = {});
// input / max(|input|_p, eps) along dim.
Tensor normalize(const Tensor& input, const NormalizeFuncOptions& options = {});
// The p-norm distance between every pair of rows i < j of input [N, M], in row-major order of (i, j):
// [N (N - 1) / 2], as torch.pdist.
Tensor pdist(const Tensor& input, double p = 2.0);

}  // namespace lockstep::nn::functional

namespace lockstep::nn {

class CosineSimilarityImpl : public Module {
 public:
  explicit CosineSimilarityImpl(const CosineSimilarityOptions& options = {})
      : Module("CosineSimilarity"), options(options) {}
  Tensor forward(const Tensor& x1, const Tensor& x2) { return functional::cosine_similarity(x1, x2, options); }
  CosineSimilarityOptions options;
};
LOCKSTEP_MODULE(CosineSimilarity);

class PairwiseDistanceImpl : public Module {
 public:
  explicit PairwiseDistanceImpl(const PairwiseDistanceOptions& options = {})
      : Module("PairwiseDistance"), options(options) {}
  Tensor forward(const Tensor& x1, const Tensor& x2) { return functional::pairwise_distance(x1, x2, options); }
  PairwiseDistanceOptions options;
};
LOCKSTEP_MODULE(PairwiseDistance);

}  // namespace lockstep::nn
