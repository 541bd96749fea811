// LayerNorm (one fused kernel each way), BatchNorm (1d/2d), SyncBatchNorm and their functions (from
// mean/var and elementwise ops).
#include "nn/normalization.h"

#include "autograd/functions.h"
#include "common/env.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn {

namespace functional {

Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool ok = x.defined() && k > 0 && x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == normalized_shape[i];
  LOCKSTEP_CHECK(ok, "layer_norm: input ", x.defined() ? x.shape() : Shape{}, " does not end with normalized_shape ",
                 Shape(normalized_shape));
  for (const Tensor* t : {&weight, &bias})
    LOCKSTEP_CHECK(!t->defined() || t->shape() == Shape(normalized_shape), "layer_norm: weight/bias ", t->shape(),
                   " must have normalized_shape ", Shape(normalized_shape));
  LOCKSTEP_CHECK(eps >= 0, "layer_norm: eps must be non-negative, got ", eps);
  // One fused kernel each way (tensor/backend.h): composed from mean, var and elementwise ops, the
  // forward and its recorded backward were about ten passes over x each, 8% of a GPT step.
  int64_t n = 1;
  for (int64_t d : normalized_shape) n *= d;
  auto detached = [](const Tensor& t) { return t.defined() ? t.detach() : t; };
  internal::LayerNormResult r = internal::layer_norm(x, n, detached(weight), detached(bias), eps);
  std::vector<Tensor> inputs{x};
  for (const Tensor* t : {&weight, &bias})
    if (t->defined()) inputs.push_back(*t);
  if (!autograd::needs_grad(inputs)) return r.y;
  const bool has_weight = weight.defined(), has_bias = bias.defined();
  const bool want_x = x.requires_grad(), want_w = has_weight && weight.requires_grad(),
             want_b = has_bias && bias.requires_grad();
  const Shape bias_shape = has_bias ? bias.shape() : Shape{};
  return autograd::record("layer_norm", r.y, inputs,
                          [=, x = x.detach(), w = detached(weight), mean = r.mean, rstd = r.rstd](const Tensor& g) {
                            internal::LayerNormGrads d =
                                internal::layer_norm_backward(g, x, mean, rstd, w, n, want_x, want_w, want_b);
                            std::vector<Tensor> grads{d.x};
                            if (has_weight) grads.push_back(d.weight);
                            if (has_bias) grads.push_back(d.bias.defined() ? internal::reshape(d.bias, bias_shape)
                                                                           : d.bias);
                            return grads;
                          });
}

namespace {

// [C] -> [1, C, 1, ...] to broadcast against x [N, C, ...].
Tensor channel_view(const Tensor& t, const Tensor& x) {
  Shape s(x.dim(), 1);
  s[1] = x.size(1);
  return reshape(t, s);
}

std::vector<int64_t> all_but_channels(const Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// Normalizes x with per-channel mean/var [C] and applies the affine transform.
Tensor normalize(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight, const Tensor& bias,
                 double eps) {
  Tensor y = (x - channel_view(mean, x)) * channel_view(rsqrt(var + eps), x);
  if (weight.defined()) y = y * channel_view(weight, x);
  if (bias.defined()) y = y + channel_view(bias, x);
  return y;
}

// r = (1 - m) r + m s, in place and unrecorded.
void update_running(Tensor& r, const Tensor& s, double m) {
  NoGradGuard no_grad;
  Tensor next = internal::add(internal::mul(r, 1 - m), internal::mul(internal::to_dtype(s.detach(), r.dtype()), m));
  internal::copy_(r, next);
}

void check_input(const char* fn, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& rm,
                 const Tensor& rv) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 2, fn, ": expected input [N, C, ...], got ", x.defined() ? x.shape() : Shape{});
  for (const Tensor* t : {&weight, &bias, &rm, &rv})
    LOCKSTEP_CHECK(!t->defined() || t->shape() == Shape{x.size(1)}, fn, ": input ", x.shape(), " has ", x.size(1),
                   " channels but a weight, bias or running statistic has shape ", t->shape());
}

// BatchNorm with batch statistics, the one path of plain and Sync BatchNorm and of batch_norm():
// checks the count, folds mean and the unbiased variance into the running statistics when they are
// given (counting the batch in num_batches_tracked when given; momentum nullopt: their cumulative
// average), and normalizes x with the batch's mean and biased variance.
Tensor batch_norm_with_stats(const char* who, const Tensor& x, const Tensor& mu, const Tensor& v, int64_t count,
                             Tensor running_mean, Tensor running_var, Tensor num_batches_tracked,
                             std::optional<double> momentum, const Tensor& weight, const Tensor& bias, double eps) {
  LOCKSTEP_CHECK(count > 1, who, ": expected more than 1 value per channel when training, got input ", x.shape());
  if (running_mean.defined()) {
    if (num_batches_tracked.defined()) {
      NoGradGuard no_grad;
      internal::copy_(num_batches_tracked, internal::add(num_batches_tracked, 1.0));
    }
    const double m = momentum ? *momentum : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
    update_running(running_mean, mu, m);
    update_running(running_var, v * (static_cast<double>(count) / static_cast<double>(count - 1)), m);
  }
  return normalize(x, mu, v, weight, bias, eps);
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  check_input("batch_norm", x, weight, bias, running_mean, running_var);
  if (!training) {
    LOCKSTEP_CHECK(running_mean.defined() && running_var.defined(),
                   "batch_norm: running_mean and running_var are needed when not training");
    return normalize(x, running_mean, running_var, weight, bias, eps);
  }
  std::vector<int64_t> dims = all_but_channels(x);
  return batch_norm_with_stats("batch_norm", x, mean(x, dims), var(x, dims, false), x.numel() / x.size(1),
                               running_mean, running_var, Tensor(), momentum, weight, bias, eps);
}

}  // namespace functional

// --- LayerNorm ---

LayerNormImpl::LayerNormImpl(const LayerNormOptions& o) : Module("LayerNorm"), options(o) {
  LOCKSTEP_CHECK(!o.normalized_shape().empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t s : o.normalized_shape())
    LOCKSTEP_CHECK(s > 0, "LayerNorm: normalized_shape ", Shape(o.normalized_shape()), " must be positive");
  if (o.elementwise_affine()) {
    weight = register_parameter("weight", lockstep::empty(Shape(o.normalized_shape())));
    if (o.bias()) bias = register_parameter("bias", lockstep::empty(Shape(o.normalized_shape())));
  }
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  return functional::layer_norm(x, options.normalized_shape(), weight, bias, options.eps());
}

// --- BatchNorm ---

BatchNormImpl::BatchNormImpl(const BatchNormOptions& o, const char* name, std::vector<int64_t> input_dims)
    : Module(name), options(o), input_dims_(std::move(input_dims)) {
  const int64_t c = o.num_features();
  LOCKSTEP_CHECK(c > 0, name, ": num_features must be positive, got ", c);
  if (o.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

void BatchNormImpl::reset_running_stats() {
  if (!running_mean.defined()) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  NoGradGuard no_grad;
  internal::fill_(num_batches_tracked, 0);
}

void BatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight), init::zeros_(bias);
}

BatchNormImpl::BatchStats BatchNormImpl::batch_stats(const Tensor& x) {
  std::vector<int64_t> dims = functional::all_but_channels(x);
  return {mean(x, dims), var(x, dims, false), x.numel() / x.size(1)};
}

Tensor BatchNormImpl::forward(const Tensor& x) {
  const int64_t c = options.num_features();
  bool rank_ok = x.defined() && x.dim() >= 2;
  if (rank_ok && !input_dims_.empty()) {
    rank_ok = false;
    for (int64_t d : input_dims_) rank_ok = rank_ok || x.dim() == d;
  }
  LOCKSTEP_CHECK(rank_ok && x.size(1) == c, name(), "(", c, "): expected input [N, ", c,
                 input_dims_ == std::vector<int64_t>{4} ? ", H, W]" : input_dims_.empty() ? ", ...]" : "] or [N, C, L]",
                 ", got ", x.defined() ? x.shape() : Shape{});
  const bool use_batch = is_training() || !running_mean.defined();
  if (!use_batch) return functional::normalize(x, running_mean, running_var, weight, bias, options.eps());

  const BatchStats s = batch_stats(x);
  // Without running statistics (eval() or track_running_stats false): batch statistics, nothing updated.
  const bool update = is_training();
  return functional::batch_norm_with_stats(name().c_str(), x, s.mean, s.var, s.count,
                                           update ? running_mean : Tensor(), update ? running_var : Tensor(),
                                           update ? num_batches_tracked : Tensor(), options.momentum(), weight, bias,
                                           options.eps());
}

// --- SyncBatchNorm ---

namespace {

// Sum over the reducer's ranks, recorded: its backward is the same all-reduce of the gradient, so each
// rank's inputs receive the gradient of every rank's loss through the shared statistics.
Tensor all_reduce_sum(const std::shared_ptr<StatsReducer>& reducer, const Tensor& x) {
  Tensor out = internal::clone(x.detach());
  reducer->all_reduce_sum(out);
  return autograd::record("sync_batch_norm_all_reduce", out, {x}, [reducer](const Tensor& g) {
    Tensor total = internal::clone(g);
    reducer->all_reduce_sum(total);
    return std::vector<Tensor>{total};
  });
}

}  // namespace

SyncBatchNormImpl::BatchStats SyncBatchNormImpl::batch_stats(const Tensor& x) {
  if (!reducer_) {
    const long long world = env_int("WORLD_SIZE", 1, 1, 1 << 24);
    LOCKSTEP_CHECK(world == 1, name(), "(", options.num_features(), "): batch statistics in a job of world size ",
                   world, " (WORLD_SIZE) with no stats reducer: they would be this rank's alone. Give it one over the "
                   "process group: SyncBatchNorm(options, dist::stats_reducer(pg)), dist::convert_sync_batchnorm(model, "
                   "pg), or wrap the model in DistributedDataParallel, which gives its group to every SyncBatchNorm "
                   "without one");
    return BatchNormImpl::batch_stats(x);
  }
  if (reducer_->world_size() <= 1) return BatchNormImpl::batch_stats(x);
  std::vector<int64_t> dims = functional::all_but_channels(x);
  const int64_t c = x.size(1);
  // [sum over this rank's values per channel..., this rank's count]; then the centred sum of squares.
  Tensor local_count = full({1}, static_cast<double>(x.numel() / c), {x.dtype(), x.device()});
  Tensor stats = all_reduce_sum(reducer_, cat({sum(x, dims), local_count}));
  const double total = stats.detach().to(kFloat64).cpu().to_vector<double>()[c];
  Tensor mu = narrow(stats, 0, 0, c) / total;
  Tensor d = x - functional::channel_view(mu, x);
  return {mu, all_reduce_sum(reducer_, sum(d * d, dims)) / total, static_cast<int64_t>(total)};
}

}  // namespace lockstep::nn
