// Per-sample normalization layers, as torch.nn.GroupNorm and InstanceNorm1d/2d/3d: statistics over each
// sample's group of channels (GroupNorm) or each sample's channel (InstanceNorm), never over the batch,
// so they behave the same in training and evaluation (InstanceNorm with track_running_stats aside).
#pragma once

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  LOCKSTEP_ARG(int64_t, num_groups, 1);
  LOCKSTEP_ARG(int64_t, num_channels, 1);
  LOCKSTEP_ARG(double, eps, 1e-5);
  LOCKSTEP_ARG(bool, affine, true);
};

// x [N, C, *] -> the same: each sample's C / num_groups consecutive channels normalized together
// (biased variance), then weight[c] x + bias[c] per channel.
class GroupNormImpl : public Module {
 public:
  explicit GroupNormImpl(const GroupNormOptions& options);
  GroupNormImpl(int64_t num_groups, int64_t num_channels) : GroupNormImpl(GroupNormOptions(num_groups, num_channels)) {}
  void reset_parameters();  // weight 1, bias 0
  Tensor forward(const Tensor& input);
  GroupNormOptions options;
  Tensor weight, bias;  // [C] (affine)
};
LOCKSTEP_MODULE(GroupNorm);

struct InstanceNormOptions {
  InstanceNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, num_features, 0);
  LOCKSTEP_ARG(double, eps, 1e-5);
  LOCKSTEP_ARG(double, momentum, 0.1);
  LOCKSTEP_ARG(bool, affine, false);
  LOCKSTEP_ARG(bool, track_running_stats, false);
};

// InstanceNorm1d [N, C, L] or [C, L]; 2d [N, C, H, W] or [C, H, W]; 3d [N, C, D, H, W] or [C, D, H, W].
// With track_running_stats, training also folds the batch's mean of the instance statistics into
// running_mean / running_var (buffers, PyTorch's names), and evaluation normalizes by those.
class InstanceNormImpl : public Module {
 public:
  InstanceNormImpl(const InstanceNormOptions& options, const char* name, int64_t spatial_dims);
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& input);
  InstanceNormOptions options;
  Tensor weight, bias;                                    // [C] (affine)
  Tensor running_mean, running_var, num_batches_tracked;  // buffers (track_running_stats)

 private:
  int64_t spatial_dims_;
};

#define LOCKSTEP_INSTANCE_NORM(Name, dims)                                                      \
  class Name##Impl : public InstanceNormImpl {                                                  \
   public:                                                                                      \
    explicit Name##Impl(const InstanceNormOptions& o) : InstanceNormImpl(o, #Name, dims) {}     \
  };                                                                                            \
  LOCKSTEP_MODULE(Name)
LOCKSTEP_INSTANCE_NORM(InstanceNorm1d, 1);
LOCKSTEP_INSTANCE_NORM(InstanceNorm2d, 2);
LOCKSTEP_INSTANCE_NORM(InstanceNorm3d, 3);
#undef LOCKSTEP_INSTANCE_NORM

namespace functional {
struct GroupNormFuncOptions {
  GroupNormFuncOptions(int64_t num_groups) : num_groups_(num_groups) {}  // NOLINT
  LOCKSTEP_ARG(int64_t, num_groups, 1);
  LOCKSTEP_ARG(Tensor, weight, Tensor());
  LOCKSTEP_ARG(Tensor, bias, Tensor());
  LOCKSTEP_ARG(double, eps, 1e-5);
};
struct InstanceNormFuncOptions {
  LOCKSTEP_ARG(Tensor, running_mean, Tensor());
  LOCKSTEP_ARG(Tensor, running_var, Tensor());
  LOCKSTEP_ARG(Tensor, weight, Tensor());
  LOCKSTEP_ARG(Tensor, bias, Tensor());
  LOCKSTEP_ARG(bool, use_input_stats, true);
  LOCKSTEP_ARG(double, momentum, 0.1);
  LOCKSTEP_ARG(double, eps, 1e-5);
};
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
inline Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& o) {
  return group_norm(input, o.num_groups(), o.weight(), o.bias(), o.eps());
}
// input [N, C, *]. use_input_stats: each instance's own statistics (folded into running_mean/var when
// defined); otherwise running_mean/var normalize.
Tensor instance_norm(const Tensor& input, const InstanceNormFuncOptions& options = {});
}  // namespace functional

}  // namespace lockstep::nn
