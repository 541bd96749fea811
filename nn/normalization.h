// Normalization layers, as torch.nn.LayerNorm, BatchNorm1d/2d and SyncBatchNorm.
//
// BatchNorm keeps running_mean, running_var and num_batches_tracked as buffers (state_dict names as
// PyTorch's), updated in training: r = (1 - momentum) r + momentum * batch statistic (the unbiased
// variance for running_var); without momentum, a cumulative average. In eval() (or with
// track_running_stats false, always batch statistics) it normalizes with the running statistics.
//
// SyncBatchNorm computes the batch statistics over every rank's batch: the per-channel sums are
// all-reduced (and their gradients too, in backward) through sync_batch_norm_comm(), the hook that
// distributed/sync_batch_norm.cpp fills in, so nn/ does not depend on distributed/. With world size 1
// or without the hook it is BatchNorm.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct LayerNormOptions {
  LayerNormOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  LayerNormOptions(int64_t normalized_size) : normalized_shape_{normalized_size} {}  // NOLINT
  LOCKSTEP_ARG(std::vector<int64_t>, normalized_shape, {});
  LOCKSTEP_ARG(double, eps, 1e-5);
  LOCKSTEP_ARG(bool, elementwise_affine, true);
  LOCKSTEP_ARG(bool, bias, true);
};

class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);
  void reset_parameters();  // weight 1, bias 0
  Tensor forward(const Tensor& input) override;
  LayerNormOptions options;
  Tensor weight, bias;  // normalized_shape; undefined without elementwise_affine (or bias)
};
LOCKSTEP_MODULE(LayerNorm);

struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, num_features, 0);
  LOCKSTEP_ARG(double, eps, 1e-5);
  LOCKSTEP_ARG(std::optional<double>, momentum, 0.1);  // nullopt: cumulative moving average
  LOCKSTEP_ARG(bool, affine, true);
  LOCKSTEP_ARG(bool, track_running_stats, true);
};

// The shared implementation; `spatial_dims` is 1 for BatchNorm1d's [N, C, L] (or [N, C]), 2 for
// BatchNorm2d's [N, C, H, W].
class BatchNormImpl : public Module {
 public:
  BatchNormImpl(const BatchNormOptions& options, const char* name, std::vector<int64_t> input_dims);
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& input) override;

  BatchNormOptions options;
  Tensor weight, bias;                                   // [C] (affine)
  Tensor running_mean, running_var, num_batches_tracked;  // buffers (track_running_stats)

 protected:
  // The statistics of a training batch: mean and biased variance [C], and the count behind them.
  virtual void batch_stats(const Tensor& x, Tensor& mean, Tensor& var, int64_t& count);

 private:
  std::vector<int64_t> input_dims_;
};

class BatchNorm1dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm1dImpl(const BatchNormOptions& o) : BatchNormImpl(o, "BatchNorm1d", {2, 3}) {}
};
LOCKSTEP_MODULE(BatchNorm1d);

class BatchNorm2dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm2dImpl(const BatchNormOptions& o) : BatchNormImpl(o, "BatchNorm2d", {4}) {}
};
LOCKSTEP_MODULE(BatchNorm2d);

// Statistics over all ranks of the default process group (any input [N, C, ...]).
class SyncBatchNormImpl : public BatchNormImpl {
 public:
  explicit SyncBatchNormImpl(const BatchNormOptions& o) : BatchNormImpl(o, "SyncBatchNorm", {}) {}

 protected:
  void batch_stats(const Tensor& x, Tensor& mean, Tensor& var, int64_t& count) override;
};
LOCKSTEP_MODULE(SyncBatchNorm);

// What SyncBatchNorm needs from distributed/: the world size of the default group (1 when none) and
// an in-place SUM all-reduce on it. Empty until distributed/sync_batch_norm.cpp is linked in.
struct SyncBatchNormComm {
  std::function<int()> world_size;
  std::function<void(Tensor&)> all_reduce_sum;
};
SyncBatchNormComm& sync_batch_norm_comm();

}  // namespace lockstep::nn
