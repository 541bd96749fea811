// GroupNorm over the fused layer-norm kernels (each sample's group is one row to normalize) and
// InstanceNorm over the fused batch-norm kernels (the batch seen as one sample of N * C channels, as
// PyTorch's instance_norm does, so running statistics come out of the same kernel).
#include "nn/group_norm.h"

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "nn/batch_norm.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn {

namespace {

// [C] -> [C, 1, ..., 1], broadcasting over the dimensions after the channels of a rank-`dim` input.
Tensor per_channel(const Tensor& t, int64_t dim) {
  Shape s(static_cast<size_t>(dim - 1), 1);
  s[0] = t.numel();
  return lockstep::reshape(t, s);
}

// [C] -> [N * C]: each sample's copy of a per-channel tensor (gradients summed back over the samples).
Tensor repeat_per_sample(const Tensor& t, int64_t n) {
  if (!t.defined()) return t;
  return lockstep::reshape(lockstep::expand(lockstep::unsqueeze(t, 0), {n, t.numel()}), {n * t.numel()});
}

void check_per_channel(const Tensor& t, int64_t c, const char* op, const char* what) {
  LOCKSTEP_CHECK(!t.defined() || t.shape() == Shape{c}, op, ": ", what, " must have shape [", c,
                 "] (one per channel), got ", t.shape());
}

}  // namespace

namespace functional {

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 2, "group_norm: Expected at least 2 dimensions for input tensor but "
                 "received ", x.defined() ? x.dim() : 0);
  const int64_t n = x.size(0), c = x.size(1);
  LOCKSTEP_CHECK(num_groups > 0 && c % num_groups == 0, "group_norm: Expected number of channels in input to be "
                 "divisible by num_groups, but got input of shape ", x.shape(), " and num_groups=", num_groups);
  check_per_channel(weight, c, "group_norm", "weight");
  check_per_channel(bias, c, "group_norm", "bias");
  const int64_t m = x.numel() / std::max<int64_t>(n * num_groups, 1);  // elements per group of a sample
  // x [N, C, *] -> [N, G, C/G * prod(*)]: one fused layer norm per row, no affine there (it is per
  // channel, not per element of the row).
  Tensor y = layer_norm(lockstep::reshape(x, {n, num_groups, m}), {m}, Tensor(), Tensor(), eps);
  y = lockstep::reshape(y, x.shape());
  if (weight.defined()) y = lockstep::mul(y, per_channel(weight, x.dim()));
  if (bias.defined()) y = lockstep::add(y, per_channel(bias, x.dim()));
  return y;
}

Tensor instance_norm(const Tensor& x, const InstanceNormFuncOptions& o) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 3, "instance_norm: expected an input [N, C, *] of at least 3 dimensions, got ",
                 x.defined() ? x.shape() : Shape{});
  const int64_t n = x.size(0), c = x.size(1);
  for (const Tensor* t : {&o.weight(), &o.bias(), &o.running_mean(), &o.running_var()})
    check_per_channel(*t, c, "instance_norm", "weight, bias and the running statistics");
  if (!o.use_input_stats()) {
    LOCKSTEP_CHECK(o.running_mean().defined() && o.running_var().defined(),
                   "instance_norm: use_input_stats false needs running_mean and running_var");
    return batch_norm(x, o.running_mean(), o.running_var(), o.weight(), o.bias(), false, o.momentum(), o.eps());
  }
  // [N, C, *] as [1, N * C, *]: batch norm's per-channel statistics are then each instance's.
  Shape folded = x.shape();
  folded.erase(folded.begin());
  folded[0] = n * c;
  folded.insert(folded.begin(), 1);
  Tensor mean_rep, var_rep;
  if (o.running_mean().defined()) {
    NoGradGuard no_grad;
    mean_rep = internal::contiguous(repeat_per_sample(o.running_mean(), n));
    var_rep = internal::contiguous(repeat_per_sample(o.running_var(), n));
  }
  Tensor y = detail::batch_norm("instance_norm", lockstep::reshape(x, folded),
                                {.weight = repeat_per_sample(o.weight(), n), .bias = repeat_per_sample(o.bias(), n),
                                 .running_mean = mean_rep, .running_var = var_rep, .num_batches_tracked = Tensor(),
                                 .training = true,
                                 .momentum = o.momentum(), .eps = o.eps(), .reducer = nullptr});
  if (mean_rep.defined()) {  // each instance's update, averaged over the batch (PyTorch's)
    NoGradGuard no_grad;
    o.running_mean().copy_(internal::mean(internal::view(mean_rep, {n, c}), 0));
    o.running_var().copy_(internal::mean(internal::view(var_rep, {n, c}), 0));
  }
  return lockstep::reshape(y, x.shape());
}

}  // namespace functional

GroupNormImpl::GroupNormImpl(const GroupNormOptions& o) : Module("GroupNorm"), options(o) {
  LOCKSTEP_CHECK(o.num_groups() > 0 && o.num_channels() > 0 && o.num_channels() % o.num_groups() == 0,
                 "GroupNorm: num_channels must be divisible by num_groups, got num_channels=", o.num_channels(),
                 " and num_groups=", o.num_groups());
  if (o.affine()) {
    weight = register_parameter("weight", empty({o.num_channels()}));
    bias = register_parameter("bias", empty({o.num_channels()}));
  }
  reset_parameters();
}

void GroupNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight), init::zeros_(bias);
}

Tensor GroupNormImpl::forward(const Tensor& x) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == options.num_channels(), "GroupNorm(",
                 options.num_groups(), ", ", options.num_channels(), "): expected input [N, ", options.num_channels(),
                 ", *], got ", x.defined() ? x.shape() : Shape{});
  return functional::group_norm(x, options.num_groups(), weight, bias, options.eps());
}

InstanceNormImpl::InstanceNormImpl(const InstanceNormOptions& o, const char* name, int64_t spatial_dims)
    : Module(name), options(o), spatial_dims_(spatial_dims) {
  const int64_t c = o.num_features();
  LOCKSTEP_CHECK(c > 0, name, ": num_features must be positive, got ", c);
  if (o.affine()) {
    weight = register_parameter("weight", empty({c}));
    bias = register_parameter("bias", empty({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));  // kept, never counted (PyTorch's)
  }
  reset_parameters();
}

void InstanceNormImpl::reset_running_stats() {
  if (!running_mean.defined()) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
}

void InstanceNormImpl::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight), init::zeros_(bias);
}

Tensor InstanceNormImpl::forward(const Tensor& x) {
  const int64_t dims = spatial_dims_;
  LOCKSTEP_CHECK(x.defined() && (x.dim() == dims + 1 || x.dim() == dims + 2), name(), ": expected ", dims + 1, "D or ",
                 dims + 2, "D input (got ", x.defined() ? x.dim() : 0, "D input)");
  const bool batched = x.dim() == dims + 2;
  const Tensor in = batched ? x : lockstep::unsqueeze(x, 0);
  if (options.affine() || options.track_running_stats())
    LOCKSTEP_CHECK(in.size(1) == options.num_features(), name(), "(", options.num_features(),
                   "): expected input with ", options.num_features(), " channels, got shape ", x.shape());
  const bool input_stats = is_training() || !options.track_running_stats();
  Tensor y = functional::instance_norm(in, functional::InstanceNormFuncOptions()
                                               .running_mean(running_mean)
                                               .running_var(running_var)
                                               .weight(weight)
                                               .bias(bias)
                                               .use_input_stats(input_stats)
                                               .momentum(options.momentum())
                                               .eps(options.eps()));
  return batched ? y : lockstep::squeeze(y, 0);
}

}  // namespace lockstep::nn
