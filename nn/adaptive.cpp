// AdaptiveLogSoftmaxWithLoss: PyTorch's forward composed from differentiable ops. Each sample's output
// is its head log-probability (its class's, or its cluster's entry) plus, outside the shortlist, its class's
// log-probability within the cluster; the clusters' rows are gathered, scored and added back by
// index_add (each row lies in one cluster, so the adds place them).
#include "nn/adaptive.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/functions.h"
#include "nn/functional.h"
#include "nn/sequential.h"
#include "tensor/factory.h"

namespace lockstep::nn {

AdaptiveLogSoftmaxWithLossImpl::AdaptiveLogSoftmaxWithLossImpl(const AdaptiveLogSoftmaxWithLossOptions& o)
    : Module("AdaptiveLogSoftmaxWithLoss"), options(o), cutoffs(o.cutoffs()) {
  const int64_t n = o.n_classes();
  LOCKSTEP_CHECK(o.in_features() > 0 && n > 0, "AdaptiveLogSoftmaxWithLoss: in_features and n_classes must be "
                 "positive, got ", o.in_features(), " and ", n);
  const std::set<int64_t> unique(cutoffs.begin(), cutoffs.end());
  LOCKSTEP_CHECK(!cutoffs.empty() && std::is_sorted(cutoffs.begin(), cutoffs.end()) && cutoffs.front() > 0 &&
                     cutoffs.back() <= n - 1 && unique.size() == cutoffs.size(),
                 "AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of unique, positive integers sorted in an "
                 "increasing order, where each value is between 1 and n_classes-1");
  LOCKSTEP_CHECK(o.div_value() > 0, "AdaptiveLogSoftmaxWithLoss: div_value must be positive, got ", o.div_value());
  cutoffs.push_back(n);
  shortlist_size = cutoffs[0];
  n_clusters = static_cast<int64_t>(cutoffs.size()) - 1;
  head_size = shortlist_size + n_clusters;
  head = register_module("head", Linear(LinearOptions(o.in_features(), head_size).bias(o.head_bias())));
  tail = register_module("tail", ModuleList());
  for (int64_t i = 0; i < n_clusters; ++i) {
    const auto hsz = static_cast<int64_t>(std::floor(o.in_features() / std::pow(o.div_value(), i + 1)));
    const int64_t osz = cutoffs[i + 1] - cutoffs[i];
    LOCKSTEP_CHECK(hsz > 0, "AdaptiveLogSoftmaxWithLoss: cluster ", i, "'s projection is ", o.in_features(), " // ",
                   o.div_value(), "^", i + 1, " = 0 features; lower div_value");
    tail->push_back(Sequential(Linear(LinearOptions(o.in_features(), hsz).bias(false)),
                               Linear(LinearOptions(hsz, osz).bias(false))));
  }
}

void AdaptiveLogSoftmaxWithLossImpl::reset_parameters() {
  head->reset_parameters();
  for (const auto& seq : *tail)
    for (const auto& m : seq->children()) m->as<LinearImpl>()->reset_parameters();
}

Tensor AdaptiveLogSoftmaxWithLossImpl::cluster_log_probs(const Tensor& input, int64_t cluster) {
  return log_softmax(tail->at<SequentialImpl>(cluster)->forward(input), 1);
}

ASMoutput AdaptiveLogSoftmaxWithLossImpl::forward(const Tensor& input_in, const Tensor& target_in) {
  LOCKSTEP_CHECK(input_in.defined() && target_in.defined(), "AdaptiveLogSoftmaxWithLoss: got an undefined tensor");
  const bool batched = input_in.dim() == 2;
  LOCKSTEP_CHECK((batched && target_in.dim() == 1) || (input_in.dim() == 1 && target_in.dim() == 0),
                 "AdaptiveLogSoftmaxWithLoss: 1D target tensor expects 2D input tensors, but found inputs with size ",
                 input_in.shape(), " and a target ", target_in.shape());
  const Tensor input = batched ? input_in : input_in.unsqueeze(0), target = batched ? target_in : target_in.unsqueeze(0);
  LOCKSTEP_CHECK(input.size(0) == target.size(0), "AdaptiveLogSoftmaxWithLoss: Input and target should have the same "
                 "size in the batch dimension, got ", input.shape(), " and ", target.shape());
  LOCKSTEP_CHECK(input.size(1) == options.in_features(), "AdaptiveLogSoftmaxWithLoss: expected input [N, ",
                 options.in_features(), "], got ", input_in.shape());
  LOCKSTEP_CHECK(target.dtype() == kInt64, "AdaptiveLogSoftmaxWithLoss: expected an int64 target, got ",
                 target.dtype());
  const int64_t N = input.size(0);
  if (N > 0) {
    const double lo = min(target).item<double>(), hi = max(target).item<double>();
    LOCKSTEP_CHECK(lo >= 0 && hi <= options.n_classes() - 1, "AdaptiveLogSoftmaxWithLoss: Target values should be in "
                   "[0, ", options.n_classes() - 1, "], but values in range [", lo, ", ", hi, "] were found. ");
  }
  Tensor output = zeros({N}, TensorOptions(input.dtype(), input.device()));
  Tensor gather_inds = target;  // the head entry each row reads: its class, or its cluster's entry
  for (int64_t i = 0; i < n_clusters; ++i) {
    const double low = static_cast<double>(cutoffs[i]), high = static_cast<double>(cutoffs[i + 1]);
    const Tensor mask = logical_and(target.ge(low), target.lt(high));
    const Tensor rows = nonzero(mask).reshape({-1});
    if (rows.numel() == 0) continue;
    const Tensor relative = index_select(target, 0, rows) - static_cast<int64_t>(low);
    const Tensor local = gather(cluster_log_probs(index_select(input, 0, rows), i), 1, relative.unsqueeze(1));
    output = index_add(output, 0, rows, local.squeeze(1));
    gather_inds = where(mask, full_like(target, static_cast<double>(shortlist_size + i)), gather_inds);
  }
  const Tensor head_logprob = log_softmax(head(input), 1);
  output = output + gather(head_logprob, 1, gather_inds.unsqueeze(1)).squeeze(1);
  Tensor loss = mean(neg(output));
  return {batched ? output : output.squeeze(0), loss};
}

Tensor AdaptiveLogSoftmaxWithLossImpl::log_prob(const Tensor& input_in) {
  LOCKSTEP_CHECK(input_in.defined() && (input_in.dim() == 1 || input_in.dim() == 2) &&
                     input_in.size(-1) == options.in_features(),
                 "AdaptiveLogSoftmaxWithLoss: expected input [N, ", options.in_features(), "], got ",
                 input_in.defined() ? input_in.shape() : Shape{});
  const bool batched = input_in.dim() == 2;
  const Tensor input = batched ? input_in : input_in.unsqueeze(0);
  const Tensor head_logprob = log_softmax(head(input), 1);
  std::vector<Tensor> parts{head_logprob.narrow(1, 0, shortlist_size)};
  for (int64_t i = 0; i < n_clusters; ++i)
    parts.push_back(cluster_log_probs(input, i) + head_logprob.narrow(1, shortlist_size + i, 1));
  Tensor out = cat(parts, 1);
  return batched ? out : out.squeeze(0);
}

Tensor AdaptiveLogSoftmaxWithLossImpl::predict(const Tensor& input) {
  return argmax(log_prob(input), input.dim() == 2 ? 1 : 0);
}

}  // namespace lockstep::nn
