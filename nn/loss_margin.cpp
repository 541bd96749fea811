// The margin and embedding losses (MarginRanking, HingeEmbedding, CosineEmbedding, SoftMargin,
// MultiLabelSoftMargin, MultiMargin, MultiLabelMargin, TripletMargin, TripletMarginWithDistance), composed
// from the differentiable ops. At a hinge's corner the gradient is PyTorch's: clamp (which passes it) where
// PyTorch composes the loss from clamp_min, where(z > 0, z, 0) (which does not) where PyTorch has a kernel
// (multi_margin_loss, multilabel_margin_loss). Under autocast those PyTorch lists as float32
// ops cast their operands once, here; the Python composites (multilabel_soft_margin_loss,
// triplet_margin_with_distance_loss) run each op by its own rule, as there.
#include <initializer_list>
#include <utility>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "nn/distance.h"
#include "nn/functional.h"
#include "tensor/backend.h"
#include "tensor/factory.h"

namespace lockstep::nn::functional {

namespace amp = autograd::amp;
using amp::AutocastOp;
using detail::check_broadcast;
using detail::reduce_loss;

namespace {

// log(1 + exp(z)) for any z; max(z, 0) written (z + |z|) / 2 so that the gradient at 0 is sigmoid(0) = 1/2.
Tensor log1p_exp(const Tensor& z) { return 0.5 * (z + abs(z)) + log(1.0 + exp(-abs(z))); }

void check_given(const char* fn, std::initializer_list<std::pair<const char*, const Tensor*>> operands) {
  for (const auto& [name, t] : operands) LOCKSTEP_CHECK(t->defined(), fn, ": got an undefined ", name);
}

// Class-index targets read on the host where they can be (a device's gather checks instead).
void check_classes(const char* fn, const char* what, const Tensor& target, int64_t lo, int64_t classes,
                   const Tensor& input) {
  if (!supports(target.device(), Capability::kHostReadable, target.dtype())) return;
  const std::vector<int64_t> v = target.contiguous().to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i)
    LOCKSTEP_CHECK(v[i] >= lo && v[i] < classes, fn, ": ", what, ": ", v[i], " at position ", i, " of target ",
                   target.shape(), " is not in [", lo, ", ", classes, ") for input ", input.shape());
}

// multi_margin_loss and multilabel_margin_loss take a vector or a matrix (an empty batch allowed).
void check_vector_or_matrix(const char* fn, const Tensor& x) {
  LOCKSTEP_CHECK(is_floating_point(x.dtype()), fn, ": expected a floating-point input, got ", x.dtype());
  LOCKSTEP_CHECK((x.dim() == 2 && x.size(1) != 0) || (x.dim() == 1 && x.size(0) != 0) || x.dim() == 0, fn,
                 ": Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", x.shape());
}

void check_triplet(const char* fn, const Tensor& a, const Tensor& p, const Tensor& n, double margin) {
  check_given(fn, {{"anchor", &a}, {"positive", &p}, {"negative", &n}});
  LOCKSTEP_CHECK(margin > 0, fn, ": margin must be greater than 0, got ", margin);
  LOCKSTEP_CHECK(a.dim() == p.dim() && p.dim() == n.dim(), fn,
                 ": The anchor, positive, and negative tensors are expected to have the same number of dimensions, "
                 "but got: anchor ", a.dim(), "D, positive ", p.dim(), "D, and negative ", n.dim(), "D inputs");
}

Tensor margin_ranking(const Tensor& x1, const Tensor& x2, const Tensor& y, const MarginRankingLossOptions& o) {
  const char* fn = "margin_ranking_loss";
  check_given(fn, {{"input1", &x1}, {"input2", &x2}, {"target", &y}});
  LOCKSTEP_CHECK(x1.dim() == x2.dim() && x1.dim() == y.dim(), fn,
                 ": All input tensors should have same dimension but got sizes: input1: ", x1.shape(), ", input2: ",
                 x2.shape(), ", target: ", y.shape());
  check_broadcast(fn, "input1", x1, "input2", x2);
  Tensor d = x1 - x2;
  check_broadcast(fn, "input1 - input2", d, "target", y);
  return reduce_loss(clamp(-y * d + o.margin(), 0.0), o.reduction());
}

Tensor hinge_embedding(const Tensor& x, const Tensor& y, const HingeEmbeddingLossOptions& o) {
  check_broadcast("hinge_embedding_loss", "input", x, "target", y);
  // PyTorch's two terms, each taken where the target is not the other label (a target of 0 takes both).
  Tensor out = where(y != 1.0, clamp(o.margin() - x, 0.0), 0.0) + where(y != -1.0, x, 0.0);
  return reduce_loss(out, o.reduction());
}

Tensor cosine_embedding(const Tensor& x1, const Tensor& x2, const Tensor& y, const CosineEmbeddingLossOptions& o) {
  const char* fn = "cosine_embedding_loss";
  check_given(fn, {{"input1", &x1}, {"input2", &x2}, {"target", &y}});
  LOCKSTEP_CHECK(y.dim() <= 1, fn, ": 0D or 1D target tensor expected, multi-target not supported, got target ",
                 y.shape());
  if (y.dim() == 1) {
    LOCKSTEP_CHECK(x1.dim() == 2 && x2.dim() == 2, fn, ": 1D target tensor expects 2D input tensors, but found ",
                   "inputs with sizes ", x1.shape(), " and ", x2.shape(), ".");
  } else {
    LOCKSTEP_CHECK(x1.dim() == 1 && x2.dim() == 1, fn, ": 0D target tensor expects 1D input tensors, but found ",
                   "inputs with sizes ", x1.shape(), " and ", x2.shape(), ".");
  }
  check_broadcast(fn, "input1", x1, "input2", x2);
  const int64_t dim = y.dim();  // the features: dimension 1 of rows, 0 of vectors
  constexpr double kEps = 1e-12;  // PyTorch's, added to each squared norm
  Tensor prod = sum(x1 * x2, dim);
  Tensor cos = prod / sqrt((sum(x1 * x1, dim) + kEps) * (sum(x2 * x2, dim) + kEps));
  check_broadcast(fn, "the inputs' cosine", cos, "target", y);
  Tensor out = where(y == 1.0, 1.0 - cos, 0.0) + where(y == -1.0, clamp(cos - o.margin(), 0.0), 0.0);
  return reduce_loss(out, o.reduction());
}

Tensor soft_margin(const Tensor& x, const Tensor& y, const SoftMarginLossOptions& o) {
  check_broadcast("soft_margin_loss", "input", x, "target", y);
  return reduce_loss(log1p_exp(-x * y), o.reduction());
}

Tensor multi_margin(const Tensor& x, const Tensor& y, const MultiMarginLossOptions& o) {
  const char* fn = "multi_margin_loss";
  check_given(fn, {{"input", &x}, {"target", &y}});
  LOCKSTEP_CHECK(o.p() == 1 || o.p() == 2, fn, ": only p == 1 and p == 2 supported, got p = ", o.p());
  const Tensor& w = o.weight();
  LOCKSTEP_CHECK(!w.defined() || w.dim() == 1, fn, ": weight must be one-dimensional, got ", w.shape());
  check_vector_or_matrix(fn, x);
  const int64_t n = x.dim() <= 1 ? 1 : x.size(0);
  const int64_t classes = x.dim() == 0 ? 1 : x.size(x.dim() - 1);
  LOCKSTEP_CHECK(y.dtype() == kInt64, fn, ": expected int64 class indices, got ", y.dtype(), " target ", y.shape());
  LOCKSTEP_CHECK(y.dim() <= 1 && y.numel() == n, fn, ": target tensor should be 1-D with size equal to the number ",
                 "of input samples (batch size). Expected target size [", n, "], but got ", y.shape(),
                 ". Input has shape ", x.shape(), ".");
  LOCKSTEP_CHECK(!w.defined() || w.numel() == classes, fn, ": inconsistent weight size, expected ", classes,
                 " but got ", w.shape());
  LOCKSTEP_CHECK(x.device() == y.device(), fn, ": devices differ: input on ", x.device(), ", target on ", y.device());
  check_classes(fn, "target out of range", y, 0, classes, x);
  Tensor xs = reshape(x, {n, classes});
  Tensor ys = reshape(y, {n, 1});
  Tensor z = o.margin() - gather(xs, 1, ys) + xs;  // [N, C], PyTorch's order of operations
  Tensor others = ne(reshape(arange(classes, {kInt64, y.device()}), {1, classes}), ys);
  Tensor h = where(others & (z > 0.0), o.p() == 1 ? z : z * z, 0.0);
  if (w.defined()) h = h * reshape(index_select(to(w.detach(), h.dtype()), 0, reshape(ys, {n})), {n, 1});
  Tensor loss = sum(h, 1) / static_cast<double>(classes);
  return reduce_loss(reshape(loss, y.shape()), o.reduction());  // 'none': the target's shape, [N], [1] or []
}

Tensor multilabel_margin(const Tensor& x, const Tensor& y, const MultiLabelMarginLossOptions& o) {
  const char* fn = "multilabel_margin_loss";
  check_given(fn, {{"input", &x}, {"target", &y}});
  check_vector_or_matrix(fn, x);
  const int64_t n = x.dim() <= 1 ? 1 : x.size(0);
  const int64_t classes = x.dim() == 0 ? 1 : x.size(x.dim() - 1);
  const bool fits = x.dim() <= 1 ? y.dim() <= 1 && y.numel() == classes : y.shape() == x.shape();
  LOCKSTEP_CHECK(fits, fn, ": inconsistent target size: ", y.shape(), " for input of size: ", x.shape());
  LOCKSTEP_CHECK(y.dtype() == kInt64, fn, ": expected int64 class indices, got ", y.dtype(), " target ", y.shape());
  LOCKSTEP_CHECK(x.device() == y.device(), fn, ": devices differ: input on ", x.device(), ", target on ", y.device());
  check_classes(fn, "argument #2 'target' is out of range", y, -1, classes, x);
  const TensorOptions counts_opts(kFloat32, x.device());  // small integers, exact in float32
  Tensor xs = reshape(x, {n, classes});
  Tensor ys = reshape(y, {n, classes});
  // A row's targets are its entries before the first -1: those with no negative entry at or before them.
  Tensor negatives_so_far = matmul(to(ys < 0.0, kFloat32), triu(ones({classes, classes}, counts_opts)));
  Tensor listed = unsqueeze(negatives_so_far == 0.0, 2);                                            // [N, j, 1]
  Tensor hits = eq(unsqueeze(ys, 2), reshape(arange(classes, {kInt64, y.device()}), {1, 1, classes}));  // [N, j, c]
  Tensor count = sum(to(hits & listed, kFloat32), 1);  // [N, c]: how often class c is listed
  Tensor other = unsqueeze(count == 0.0, 1);           // [N, 1, k]: k is no target
  Tensor z = 1.0 - unsqueeze(xs, 2) + unsqueeze(xs, 1);  // [N, j, k]: 1 - x_j + x_k, PyTorch's order
  Tensor h = where(other & (z > 0.0), z, 0.0) * unsqueeze(to(count, x.dtype()), 2);
  Tensor loss = sum(h, std::vector<int64_t>{1, 2}) / static_cast<double>(classes);
  return reduce_loss(x.dim() <= 1 ? reshape(loss, {}) : loss, o.reduction());
}

Tensor triplet_margin(const Tensor& a, const Tensor& p, const Tensor& n, const TripletMarginLossOptions& o) {
  const char* fn = "triplet_margin_loss";
  check_triplet(fn, a, p, n, o.margin());
  check_broadcast(fn, "anchor", a, "positive", p);
  check_broadcast(fn, "anchor", a, "negative", n);
  if (o.swap()) check_broadcast(fn, "positive", p, "negative", n);
  const auto dist = PairwiseDistanceOptions().p(o.p()).eps(o.eps());
  Tensor d_pos = pairwise_distance(a, p, dist);
  Tensor d_neg = pairwise_distance(a, n, dist);
  if (o.swap()) d_neg = minimum(d_neg, pairwise_distance(p, n, dist));
  return reduce_loss(clamp(o.margin() + d_pos - d_neg, 0.0), o.reduction());
}

}  // namespace

Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                           const MarginRankingLossOptions& o) {
  const auto v = amp::cast_inputs(AutocastOp::Loss, input1, input2, target);
  return margin_ranking(v[0], v[1], v[2], o);
}
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, const HingeEmbeddingLossOptions& o) {
  const auto v = amp::cast_inputs(AutocastOp::Loss, input, target);
  return hinge_embedding(v[0], v[1], o);
}
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             const CosineEmbeddingLossOptions& o) {
  const auto v = amp::cast_inputs(AutocastOp::Loss, input1, input2, target);
  return cosine_embedding(v[0], v[1], v[2], o);
}
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, const SoftMarginLossOptions& o) {
  const auto v = amp::cast_inputs(AutocastOp::Loss, input, target);
  return soft_margin(v[0], v[1], o);
}
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, const MultiMarginLossOptions& o) {
  return multi_margin(amp::cast_input(AutocastOp::Loss, input), target, o);
}
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, const MultiLabelMarginLossOptions& o) {
  return multilabel_margin(amp::cast_input(AutocastOp::Loss, input), target, o);
}
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossOptions& o) {
  const auto v = amp::cast_inputs(AutocastOp::Loss, anchor, positive, negative);
  return triplet_margin(v[0], v[1], v[2], o);
}

Tensor multilabel_soft_margin_loss(const Tensor& x, const Tensor& y, const MultiLabelSoftMarginLossOptions& o) {
  const char* fn = "multilabel_soft_margin_loss";
  check_broadcast(fn, "input", x, "target", y);
  LOCKSTEP_CHECK(x.dim() >= 1, fn, ": expected input [N, C] or [C] (classes last), got ", x.shape());
  // -(y log sigmoid(x) + (1 - y) log sigmoid(-x)), with -log sigmoid(x) = log(1 + exp(-x)).
  Tensor loss = y * log1p_exp(-x) + (1.0 - y) * log1p_exp(x);
  if (o.weight().defined()) {
    check_broadcast(fn, "input", x, "weight", o.weight());
    loss = loss * o.weight();
  }
  // As F.multilabel_soft_margin_loss: the classes are input's last dimension, and their mean is per sample.
  const int64_t class_dim = x.dim() - 1;
  loss = sum(loss, class_dim) / static_cast<double>(x.size(class_dim));
  return reduce_loss(loss, o.reduction());
}

Tensor triplet_margin_with_distance_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                                         const TripletMarginWithDistanceLossOptions& o) {
  check_triplet("triplet_margin_with_distance_loss", anchor, positive, negative, o.margin());
  auto distance = [&](const Tensor& a, const Tensor& b) {
    return o.distance_function() ? (*o.distance_function())(a, b) : pairwise_distance(a, b);
  };
  Tensor d_pos = distance(anchor, positive);
  Tensor d_neg = distance(anchor, negative);
  if (o.swap()) d_neg = minimum(d_neg, distance(positive, negative));
  return reduce_loss(clamp(o.margin() + d_pos - d_neg, 0.0), o.reduction());
}

}  // namespace lockstep::nn::functional
