// AdaptiveLogSoftmaxWithLoss, as torch.nn's (Grave et al., "Efficient softmax approximation for GPUs"):
// the most frequent classes (below cutoffs[0]) in a head softmax beside one entry per tail cluster, each
// cluster's classes in a smaller softmax of its own, projected down by div_value per cluster:
//   nn::AdaptiveLogSoftmaxWithLoss asm_(nn::AdaptiveLogSoftmaxWithLossOptions(512, 10000, {100, 1000}));
//   auto [output, loss] = asm_(hidden, target);   // output: each target's log-probability [N]
// Parameters as PyTorch's: head.weight (head.bias with head_bias), tail.<i>.0.weight and tail.<i>.1.weight.
// loss is a differentiable scalar tensor, as PyTorch's (LibTorch's ASMoutput holds a double).
#pragma once

#include <vector>

#include "nn/containers.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct AdaptiveLogSoftmaxWithLossOptions {
  AdaptiveLogSoftmaxWithLossOptions(int64_t in_features, int64_t n_classes, std::vector<int64_t> cutoffs)
      : in_features_(in_features), n_classes_(n_classes), cutoffs_(std::move(cutoffs)) {}
  LOCKSTEP_ARG(int64_t, in_features, 0);
  LOCKSTEP_ARG(int64_t, n_classes, 0);
  LOCKSTEP_ARG(std::vector<int64_t>, cutoffs, {});
  LOCKSTEP_ARG(double, div_value, 4.0);
  LOCKSTEP_ARG(bool, head_bias, false);
};

struct ASMoutput {
  Tensor output;  // the target's log-probability per sample
  Tensor loss;    // mean of -output
};

class AdaptiveLogSoftmaxWithLossImpl : public Module {
 public:
  explicit AdaptiveLogSoftmaxWithLossImpl(const AdaptiveLogSoftmaxWithLossOptions& options);
  AdaptiveLogSoftmaxWithLossImpl(int64_t in_features, int64_t n_classes, std::vector<int64_t> cutoffs)
      : AdaptiveLogSoftmaxWithLossImpl(AdaptiveLogSoftmaxWithLossOptions(in_features, n_classes, std::move(cutoffs))) {}
  void reset_parameters();
  // input [N, in_features] ([in_features] unbatched), target int64 [N] ([]) in [0, n_classes).
  ASMoutput forward(const Tensor& input, const Tensor& target);
  // Every class's log-probability: [N, n_classes].
  Tensor log_prob(const Tensor& input);
  // The most likely class per sample: int64 [N].
  Tensor predict(const Tensor& input);

  AdaptiveLogSoftmaxWithLossOptions options;
  std::vector<int64_t> cutoffs;  // options.cutoffs() and n_classes
  int64_t shortlist_size = 0, n_clusters = 0, head_size = 0;
  Linear head{nullptr};
  ModuleList tail{nullptr};

 private:
  Tensor cluster_log_probs(const Tensor& input, int64_t cluster);  // log-softmax of tail[cluster]'s outputs
};
LOCKSTEP_MODULE(AdaptiveLogSoftmaxWithLoss);

}  // namespace lockstep::nn
