// LayerNorm (one fused kernel each way) and its function; RMSNorm and LocalResponseNorm composed; the
// BatchNorm (1d/2d/3d) and SyncBatchNorm modules over nn/batch_norm.h's function.
#include "nn/normalization.h"

#include <ostream>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "common/env.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn {

namespace {
// torch.finfo(dtype).eps: rms_norm's default.
double dtype_epsilon(Dtype d) {
  switch (d) {
    case kFloat64: return 0x1p-52;
    case kBFloat16: return 0x1p-7;
    case kFloat16: return 0x1p-10;
    default: return 0x1p-23;
  }
}
}  // namespace

namespace functional {

Tensor layer_norm(const Tensor& x_in, const std::vector<int64_t>& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps) {
  const auto xwb = autograd::amp::cast_inputs(autograd::amp::AutocastOp::LayerNorm, x_in, weight_in, bias_in);
  const Tensor &x = xwb[0], &weight = xwb[1], &bias = xwb[2];
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

Tensor rms_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool ok = x.defined() && k > 0 && x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == normalized_shape[i];
  LOCKSTEP_CHECK(ok, "rms_norm: input ", x.defined() ? x.shape() : Shape{}, " does not end with normalized_shape ",
                 Shape(normalized_shape));
  LOCKSTEP_CHECK(!weight.defined() || weight.shape() == Shape(normalized_shape), "rms_norm: weight ",
                 weight.shape(), " must have normalized_shape ", Shape(normalized_shape));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < k; ++i) dims.push_back(x.dim() - k + i);
  const double e = eps ? *eps : dtype_epsilon(x.dtype());
  Tensor y = lockstep::mul(x, lockstep::rsqrt(lockstep::add(lockstep::mean(lockstep::mul(x, x), dims, true), e)));
  return weight.defined() ? lockstep::mul(y, weight) : y;
}

Tensor local_response_norm(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 3, "local_response_norm: Expected 3D or higher dimensionality input (got ",
                 x.defined() ? x.dim() : 0, " dimensions)");
  LOCKSTEP_CHECK(size > 0, "local_response_norm: size must be positive, got ", size);
  const int64_t c = x.size(1);
  // The window [c - size/2, c + (size-1)/2] over channels zero-padded at both ends: a sum of `size`
  // shifted slices (size is a handful of channels).
  Tensor sq = lockstep::mul(x, x);
  Shape front = x.shape(), back = x.shape();
  front[1] = size / 2, back[1] = (size - 1) / 2;
  Tensor padded = lockstep::cat({zeros(front, TensorOptions(x.dtype(), x.device())), sq,
                                 zeros(back, TensorOptions(x.dtype(), x.device()))}, 1);
  Tensor sum = lockstep::narrow(padded, 1, 0, c);
  for (int64_t j = 1; j < size; ++j) sum = lockstep::add(sum, lockstep::narrow(padded, 1, j, c));
  Tensor div = lockstep::pow(lockstep::add(lockstep::mul(sum, alpha / static_cast<double>(size)), k), beta);
  return lockstep::div(x, div);
}

}  // namespace functional

// --- RMSNorm, LocalResponseNorm ---

RMSNormImpl::RMSNormImpl(const RMSNormOptions& o) : Module("RMSNorm"), options(o) {
  LOCKSTEP_CHECK(!o.normalized_shape().empty(), "RMSNorm: normalized_shape must not be empty");
  if (o.elementwise_affine()) weight = register_parameter("weight", lockstep::empty(Shape(o.normalized_shape())));
  reset_parameters();
}

void RMSNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNormImpl::forward(const Tensor& x) {
  return functional::rms_norm(x, options.normalized_shape(), weight, options.eps());
}

Tensor LocalResponseNormImpl::forward(const Tensor& x) {
  return functional::local_response_norm(x, options.size(), options.alpha(), options.beta(), options.k());
}

// --- CrossMapLRN2d ---

CrossMapLRN2dImpl::CrossMapLRN2dImpl(const CrossMapLRN2dOptions& o) : Module("CrossMapLRN2d"), options(o) {
  LOCKSTEP_CHECK(o.size() > 0, "CrossMapLRN2d: size must be positive, got ", o.size());
}

namespace {

// v's prefix sums along the channels: P [N, C + 1, H, W], P[:, i] the sum over channels < i, so that
// channels [lo, up) sum to P[:, up] - P[:, lo].
Tensor channel_prefix(const Tensor& v) { return cat({zeros_like(v.narrow(1, 0, 1)), cumsum(v, 1)}, 1); }

}  // namespace

Tensor CrossMapLRN2dImpl::forward(const Tensor& input) {
  LOCKSTEP_CHECK(input.defined() && input.dim() == 4, "CrossMapLRN2d: Expected input to be 4D, got ",
                 input.defined() ? input.dim() : 0, "D instead.");
  const int64_t C = input.size(1), size = options.size();
  const double alpha = options.alpha(), beta = options.beta(), k = static_cast<double>(options.k());
  // The forward's window, as LibTorch's running update leaves it: channel c sums x^2 over [0, min(c + pre,
  // C)) less [1, c - pre + 1) once c > pre (channel 0 is never taken out). The backward's: ratio = g * y /
  // scale summed over channels [c - inv, c + size - inv), inv = size - (size - 1) / 2, clipped to the input.
  const int64_t pre = (size - 1) / 2 + 1, inv = size - (size - 1) / 2;
  std::vector<int64_t> one(C, 1), hi(C), cut(C), blo(C), bhi(C);
  for (int64_t c = 0; c < C; ++c) {
    hi[c] = std::min(c + pre, C);
    cut[c] = c > pre ? c - pre + 1 : 1;
    blo[c] = std::clamp<int64_t>(c - inv, 0, C);
    bhi[c] = std::clamp<int64_t>(c + size - inv, 0, C);
  }
  auto ids = [&](const std::vector<int64_t>& v) { return tensor(v, {C}, input.device()); };
  const bool grad = autograd::needs_grad({input});
  Tensor x = input.detach(), s, y;
  {
    NoGradGuard no_grad;
    const Tensor P = channel_prefix(x * x);  // sums over [0, hi) less [1, cut)
    s = (index_select(P, 1, ids(hi)) - index_select(P, 1, ids(cut)) + index_select(P, 1, ids(one))) *
            (alpha / static_cast<double>(size)) + k;
    y = pow(s, -beta) * x;
  }
  if (!grad) return y;
  return autograd::record("CrossMapLRN2d", y, {input}, [=, lo = ids(blo), up = ids(bhi)](const Tensor& g) {
    const Tensor P = channel_prefix(g * y / s);
    const Tensor accum = index_select(P, 1, up) - index_select(P, 1, lo);
    return std::vector<Tensor>{pow(s, -beta) * g - (2 * alpha * beta / static_cast<double>(size)) * x * accum};
  });
}

// --- LayerNorm ---

void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << Shape(options.normalized_shape()) << ", eps=" << options.eps()
     << ", elementwise_affine=" << (options.elementwise_affine() ? "true" : "false") << ")";
}

void BatchNormImpl::pretty_print(std::ostream& os) const {
  os << name() << "(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum()) os << *options.momentum();
  else os << "None";
  os << ", affine=" << (options.affine() ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats() ? "true" : "false") << ")";
}

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

Tensor BatchNormImpl::forward(const Tensor& x) {
  const int64_t c = options.num_features();
  bool rank_ok = x.defined() && x.dim() >= 2;
  if (rank_ok && !input_dims_.empty()) {
    rank_ok = false;
    for (int64_t d : input_dims_) rank_ok = rank_ok || x.dim() == d;
  }
  LOCKSTEP_CHECK(rank_ok && x.size(1) == c, name(), "(", c, "): expected input [N, ", c,
                 input_dims_ == std::vector<int64_t>{4}   ? ", H, W]"
                 : input_dims_ == std::vector<int64_t>{5} ? ", D, H, W]"
                 : input_dims_.empty()                    ? ", ...]"
                                                          : "] or [N, C, L]",
                 ", got ", x.defined() ? x.shape() : Shape{});
  // Batch statistics in training, or in eval() without running ones (track_running_stats false).
  const bool batch_stats = is_training() || !running_mean.defined();
  return detail::batch_norm(name().c_str(), x,
                            {.weight = weight, .bias = bias, .running_mean = running_mean, .running_var = running_var,
                             .num_batches_tracked = num_batches_tracked, .training = is_training(),
                             .momentum = options.momentum(), .eps = options.eps(),
                             .reducer = batch_stats ? batch_reducer() : nullptr});
}

// --- SyncBatchNorm ---

std::shared_ptr<StatsReducer> SyncBatchNormImpl::batch_reducer() {
  if (!reducer_) {
    const long long world = env_int("WORLD_SIZE", 1, 1, 1 << 24);
    LOCKSTEP_CHECK(world == 1, name(), "(", options.num_features(), "): batch statistics in a job of world size ",
                   world, " (WORLD_SIZE) with no stats reducer: they would be this rank's alone. Give it one over the "
                   "process group: SyncBatchNorm(options, dist::stats_reducer(pg)), dist::convert_sync_batchnorm(model, "
                   "pg), or wrap the model in DistributedDataParallel, which gives its group to every SyncBatchNorm "
                   "without one");
    return nullptr;
  }
  return reducer_;
}

}  // namespace lockstep::nn
