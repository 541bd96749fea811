// Loss modules, as torch.nn's (CrossEntropyLoss, NLLLoss, BCELoss, BCEWithLogitsLoss, MSELoss, L1Loss,
// SmoothL1Loss, HuberLoss, KLDivLoss, PoissonNLLLoss, GaussianNLLLoss, MarginRankingLoss, HingeEmbeddingLoss,
// CosineEmbeddingLoss, SoftMarginLoss, MultiLabelSoftMarginLoss, MultiMarginLoss, MultiLabelMarginLoss,
// TripletMarginLoss, TripletMarginWithDistanceLoss); options as their torch keyword arguments
// (nn/functional.h), e.g.
//   nn::CrossEntropyLoss loss_fn(nn::CrossEntropyLossOptions().ignore_index(-1).label_smoothing(0.1));
//   Tensor loss = loss_fn(logits, targets);
//   nn::TripletMarginLoss triplet(nn::TripletMarginLossOptions().margin(0.5).swap(true));
//   Tensor t = triplet(anchor, positive, negative);
#pragma once

#include "common/check.h"
#include "nn/distance.h"
#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

#define LOCKSTEP_LOSS(Name, fn)                                                                  \
  class Name##Impl : public Module {                                                             \
   public:                                                                                       \
    explicit Name##Impl(const Name##Options& options = {}) : Module(#Name), options(options) {}  \
    Tensor forward(const Tensor& input, const Tensor& target) {                                  \
      return functional::fn(input, target, options);                                             \
    }                                                                                            \
    Name##Options options;                                                                       \
  };                                                                                             \
  LOCKSTEP_MODULE(Name)

LOCKSTEP_LOSS(CrossEntropyLoss, cross_entropy);
LOCKSTEP_LOSS(NLLLoss, nll_loss);
LOCKSTEP_LOSS(BCELoss, binary_cross_entropy);
LOCKSTEP_LOSS(BCEWithLogitsLoss, binary_cross_entropy_with_logits);
LOCKSTEP_LOSS(MSELoss, mse_loss);
LOCKSTEP_LOSS(L1Loss, l1_loss);
LOCKSTEP_LOSS(SmoothL1Loss, smooth_l1_loss);
LOCKSTEP_LOSS(HuberLoss, huber_loss);
LOCKSTEP_LOSS(KLDivLoss, kl_div);
LOCKSTEP_LOSS(PoissonNLLLoss, poisson_nll_loss);
LOCKSTEP_LOSS(HingeEmbeddingLoss, hinge_embedding_loss);
LOCKSTEP_LOSS(SoftMarginLoss, soft_margin_loss);
LOCKSTEP_LOSS(MultiLabelSoftMarginLoss, multilabel_soft_margin_loss);
LOCKSTEP_LOSS(MultiLabelMarginLoss, multilabel_margin_loss);

// Losses of three operands, forward(a, b, c) with torch's argument names.
#define LOCKSTEP_LOSS3(Name, fn, a, b, c)                                                        \
  class Name##Impl : public Module {                                                             \
   public:                                                                                       \
    explicit Name##Impl(const Name##Options& options = {}) : Module(#Name), options(options) {}  \
    Tensor forward(const Tensor& a, const Tensor& b, const Tensor& c) {                          \
      return functional::fn(a, b, c, options);                                                   \
    }                                                                                            \
    Name##Options options;                                                                       \
  };                                                                                             \
  LOCKSTEP_MODULE(Name)

LOCKSTEP_LOSS3(GaussianNLLLoss, gaussian_nll_loss, input, target, var);
LOCKSTEP_LOSS3(MarginRankingLoss, margin_ranking_loss, input1, input2, target);
LOCKSTEP_LOSS3(CosineEmbeddingLoss, cosine_embedding_loss, input1, input2, target);

#undef LOCKSTEP_LOSS3
#undef LOCKSTEP_LOSS

// The three below refuse bad options when made, as torch.nn's constructors do, not at the first forward.
class MultiMarginLossImpl : public Module {
 public:
  explicit MultiMarginLossImpl(const MultiMarginLossOptions& options = {})
      : Module("MultiMarginLoss"), options(options) {
    LOCKSTEP_CHECK(options.p() == 1 || options.p() == 2, "MultiMarginLoss: only p == 1 and p == 2 supported, got p = ",
                   options.p());
    LOCKSTEP_CHECK(!options.weight().defined() || options.weight().dim() == 1,
                   "MultiMarginLoss: expected weight to be None or 1D tensor, got ", options.weight().dim(),
                   "D instead");
  }
  Tensor forward(const Tensor& input, const Tensor& target) {
    return functional::multi_margin_loss(input, target, options);
  }
  MultiMarginLossOptions options;
};
LOCKSTEP_MODULE(MultiMarginLoss);

class TripletMarginLossImpl : public Module {
 public:
  explicit TripletMarginLossImpl(const TripletMarginLossOptions& options = {})
      : Module("TripletMarginLoss"), options(options) {
    LOCKSTEP_CHECK(options.margin() > 0, "TripletMarginLoss: expected margin to be greater than 0, got ",
                   options.margin(), " instead");
  }
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) {
    return functional::triplet_margin_loss(anchor, positive, negative, options);
  }
  TripletMarginLossOptions options;
};
LOCKSTEP_MODULE(TripletMarginLoss);

class TripletMarginWithDistanceLossImpl : public Module {
 public:
  explicit TripletMarginWithDistanceLossImpl(const TripletMarginWithDistanceLossOptions& options = {})
      : Module("TripletMarginWithDistanceLoss"), options(options) {
    LOCKSTEP_CHECK(options.margin() > 0, "TripletMarginWithDistanceLoss: expected margin to be greater than 0, got ",
                   options.margin(), " instead");
  }
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) {
    return functional::triplet_margin_with_distance_loss(anchor, positive, negative, options);
  }
  TripletMarginWithDistanceLossOptions options;
};
LOCKSTEP_MODULE(TripletMarginWithDistanceLoss);

}  // namespace lockstep::nn
