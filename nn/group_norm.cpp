// GroupNorm over its fused kernels (tensor/backend.h: one pass each way over a sample's group) and
// InstanceNorm over the fused batch-norm kernels (the batch seen as one sample of N * C channels, as
// PyTorch's instance_norm does, so running statistics come out of the same kernel).
#include "nn/group_norm.h"

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/batch_norm.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn {

namespace {

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

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  // PyTorch's autocast lists put group_norm beside layer_norm (float32 on CUDA, as it comes on the CPU).
  const auto xwb = autograd::amp::cast_inputs(autograd::amp::AutocastOp::LayerNorm, x_in, weight_in, bias_in);
  const Tensor &x = xwb[0], &weight = xwb[1], &bias = xwb[2];
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 2, "group_norm: Expected at least 2 dimensions for input tensor but "
                 "received ", x.defined() ? x.dim() : 0);
  const int64_t c = x.size(1);
  LOCKSTEP_CHECK(num_groups > 0 && c % num_groups == 0, "group_norm: Expected number of channels in input to be "
                 "divisible by num_groups, but got input of shape ", x.shape(), " and num_groups=", num_groups);
  check_per_channel(weight, c, "group_norm", "weight");
  check_per_channel(bias, c, "group_norm", "bias");
  // One fused kernel each way (tensor/backend.h): as LayerNorm's kernel over [N, G, C/G * HW] rows
  // with the per-channel affine composed after it, forward and backward were 2.5-3x PyTorch's time.
  auto detached = [](const Tensor& t) { return t.defined() ? t.detach() : t; };
  internal::LayerNormResult r = internal::group_norm(x, num_groups, detached(weight), detached(bias), eps);
  std::vector<Tensor> inputs{x};
  for (const Tensor* t : {&weight, &bias})
    if (t->defined()) inputs.push_back(*t);
  if (!autograd::needs_grad(inputs)) return r.y;
  const bool has_weight = weight.defined(), has_bias = bias.defined();
  const bool want_x = x.requires_grad(), want_w = has_weight && weight.requires_grad(),
             want_b = has_bias && bias.requires_grad();
  // The kernels compute in x's dtype; a float32 weight or bias beside a 16-bit x gets its own dtype back.
  const Dtype w_dtype = has_weight ? weight.dtype() : x.dtype(), b_dtype = has_bias ? bias.dtype() : x.dtype();
  return autograd::record("group_norm", r.y, inputs,
                          [=, x = x.detach(), w = detached(weight), mean = r.mean, rstd = r.rstd](const Tensor& g) {
                            internal::LayerNormGrads d = internal::group_norm_backward(
                                g, x, mean, rstd, w, num_groups, want_x, want_w, want_b);
                            auto as = [](const Tensor& t, Dtype dt) {
                              return t.defined() ? internal::to_dtype(t, dt) : t;
                            };
                            std::vector<Tensor> grads{d.x};
                            if (has_weight) grads.push_back(as(d.weight, w_dtype));
                            if (has_bias) grads.push_back(as(d.bias, b_dtype));
                            return grads;
                          });
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
