// Normalization layers, as torch.nn.LayerNorm, RMSNorm, LocalResponseNorm, CrossMapLRN2d, BatchNorm1d/2d/3d and
// SyncBatchNorm (GroupNorm and InstanceNorm: nn/group_norm.h).
//
// BatchNorm keeps running_mean, running_var and num_batches_tracked as buffers (state_dict names as
// PyTorch's), updated in training: r = (1 - momentum) r + momentum * batch statistic (the unbiased
// variance for running_var); without momentum, a cumulative average. In eval() (or with
// track_running_stats false, always batch statistics) it normalizes with the running statistics.
//
// SyncBatchNorm computes the batch statistics over every rank's batch: the per-channel sums are
// all-reduced (and the backward's per-channel sums too) through its StatsReducer (nn/batch_norm.h), which the program gives
// it explicitly: nn/ declares the interface, distributed/ implements it over a process group
// (dist::stats_reducer(pg), distributed/sync_batch_norm.h), and DistributedDataParallel gives one over
// its own group to every SyncBatchNorm in its module that has none (as dist::convert_sync_batchnorm
// does). Over a world of one it is BatchNorm. Without a reducer it is BatchNorm only in a job of one
// process (WORLD_SIZE, the launcher's variable, unset or 1); in a larger job it throws, naming the module
// and the world size, rather than normalize each rank's batch alone.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "nn/batch_norm.h"
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
  Tensor forward(const Tensor& input);
  void pretty_print(std::ostream& os) const override;
  LayerNormOptions options;
  Tensor weight, bias;  // normalized_shape; undefined without elementwise_affine (or bias)
};
LOCKSTEP_MODULE(LayerNorm);

// torch.nn.RMSNorm: x / sqrt(mean(x^2 over normalized_shape) + eps) * weight; eps unset is the input
// dtype's machine epsilon, as PyTorch's.
struct RMSNormOptions {
  RMSNormOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT
  RMSNormOptions(int64_t normalized_size) : normalized_shape_{normalized_size} {}  // NOLINT
  LOCKSTEP_ARG(std::vector<int64_t>, normalized_shape, {});
  LOCKSTEP_ARG(std::optional<double>, eps, std::nullopt);
  LOCKSTEP_ARG(bool, elementwise_affine, true);
};

class RMSNormImpl : public Module {
 public:
  explicit RMSNormImpl(const RMSNormOptions& options);
  void reset_parameters();  // weight 1
  Tensor forward(const Tensor& input);
  RMSNormOptions options;
  Tensor weight;  // normalized_shape; undefined without elementwise_affine
};
LOCKSTEP_MODULE(RMSNorm);

// Across channels: x_c / (k + alpha / size * sum of x_j^2 over the `size` channels around c)^beta
// (zeros beyond the edges), input [N, C, *].
struct LocalResponseNormOptions {
  LocalResponseNormOptions(int64_t size) : size_(size) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, size, 1);
  LOCKSTEP_ARG(double, alpha, 1e-4);
  LOCKSTEP_ARG(double, beta, 0.75);
  LOCKSTEP_ARG(double, k, 1.0);
};

class LocalResponseNormImpl : public Module {
 public:
  explicit LocalResponseNormImpl(const LocalResponseNormOptions& options)
      : Module("LocalResponseNorm"), options(options) {}
  Tensor forward(const Tensor& input);
  LocalResponseNormOptions options;
};
LOCKSTEP_MODULE(LocalResponseNorm);

// LibTorch's CrossMapLRN2d (Torch7's SpatialCrossMapLRN): LocalResponseNorm over 4-D input, by its own
// running-window rule, forward and backward exactly as LibTorch computes them (its window keeps channel 0
// in every sum and its backward reads a window shifted from the forward's; both are reproduced, so
// results and gradients match LibTorch's, not the textbook formula's).
struct CrossMapLRN2dOptions {
  CrossMapLRN2dOptions(int64_t size) : size_(size) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, size, 1);
  LOCKSTEP_ARG(double, alpha, 1e-4);
  LOCKSTEP_ARG(double, beta, 0.75);
  LOCKSTEP_ARG(int64_t, k, 1);
};

class CrossMapLRN2dImpl : public Module {
 public:
  explicit CrossMapLRN2dImpl(const CrossMapLRN2dOptions& options);
  CrossMapLRN2dImpl(int64_t size) : CrossMapLRN2dImpl(CrossMapLRN2dOptions(size)) {}  // NOLINT
  Tensor forward(const Tensor& input);  // [N, C, H, W]
  CrossMapLRN2dOptions options;
};
LOCKSTEP_MODULE(CrossMapLRN2d);

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
  Tensor forward(const Tensor& input);
  void pretty_print(std::ostream& os) const override;

  BatchNormOptions options;
  Tensor weight, bias;                                   // [C] (affine)
  Tensor running_mean, running_var, num_batches_tracked;  // buffers (track_running_stats)

 protected:
  // The ranks whose batches the batch statistics cover (nn/batch_norm.h); null: this rank's alone.
  virtual std::shared_ptr<StatsReducer> batch_reducer() { return nullptr; }

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

class BatchNorm3dImpl : public BatchNormImpl {
 public:
  explicit BatchNorm3dImpl(const BatchNormOptions& o) : BatchNormImpl(o, "BatchNorm3d", {5}) {}
};
LOCKSTEP_MODULE(BatchNorm3d);

// Statistics over all ranks of `reducer` (any input [N, C, ...]); PyTorch's SyncBatchNorm(...,
// process_group). The reducer may be given later (set_reducer; DDP does it for those without one).
class SyncBatchNormImpl : public BatchNormImpl {
 public:
  explicit SyncBatchNormImpl(const BatchNormOptions& o, std::shared_ptr<StatsReducer> reducer = nullptr)
      : BatchNormImpl(o, "SyncBatchNorm", {}), reducer_(std::move(reducer)) {}
  void set_reducer(std::shared_ptr<StatsReducer> reducer) { reducer_ = std::move(reducer); }
  const std::shared_ptr<StatsReducer>& reducer() const { return reducer_; }

 protected:
  std::shared_ptr<StatsReducer> batch_reducer() override;

 private:
  std::shared_ptr<StatsReducer> reducer_;
};
LOCKSTEP_MODULE(SyncBatchNorm);

}  // namespace lockstep::nn
