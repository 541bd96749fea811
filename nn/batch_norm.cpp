// BatchNorm's forward and backward in one autograd node, over the tensor layer's fused kernels: two
// passes over x forward (per-channel sums, then normalize), two backward (per-channel sums of dy and
// dy * (x - mean), then dx). SyncBatchNorm all-reduces the sums between the passes, as PyTorch's
// batch_norm_stats / _elemt / _backward_reduce / _backward_elemt do. Composed from mean, var and
// elementwise ops it was about ten passes each way.
#include "nn/batch_norm.h"

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "tensor/batch_norm.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn {
namespace detail {
namespace {

Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : t; }

// r = (1 - m) r + m s, in place and unrecorded.
void update_running(Tensor& r, const Tensor& s, double m) {
  NoGradGuard no_grad;
  Tensor next = internal::add(internal::mul(r, 1 - m), internal::mul(internal::to_dtype(s, r.dtype()), m));
  internal::copy_(r, next);
}

void check_input(const char* who, const Tensor& x, const BatchNormArgs& a) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 2, who, ": expected input [N, C, ...], got ",
                 x.defined() ? x.shape() : Shape{});
  for (const Tensor* t : {&a.weight, &a.bias, &a.running_mean, &a.running_var}) {
    LOCKSTEP_CHECK(!t->defined() || t->shape() == Shape{x.size(1)}, who, ": input ", x.shape(), " has ", x.size(1),
                   " channels but a weight, bias or running statistic has shape ", t->shape());
    LOCKSTEP_CHECK(!t->defined() || t->device() == x.device(), who, ": input ", x.shape(), " is on ", x.device(),
                   " but a weight, bias or running statistic is on ", t->device());
  }
  LOCKSTEP_CHECK(a.running_mean.defined() == a.running_var.defined(), who,
                 ": running_mean and running_var must be given together");
  LOCKSTEP_CHECK(a.eps >= 0, who, ": eps must be non-negative, got ", a.eps);
}

// [sum x per channel..., sum x^2 per channel..., this rank's count], summed over the reducer's ranks:
// returns the total sums [2, C] and the total count.
std::pair<Tensor, double> all_reduce_stats(StatsReducer& reducer, const Tensor& sums, double count) {
  const int64_t C = sums.size(1);
  Tensor buf = internal::cat({internal::reshape(sums, {2 * C}), full({1}, count, {kFloat64, sums.device()})});
  reducer.all_reduce_sum(buf);
  return {internal::view_range(buf, 0, {2, C}), internal::narrow(buf, 0, 2 * C, 1).item<double>()};
}

}  // namespace

Tensor batch_norm(const char* who, const Tensor& x, const BatchNormArgs& a) {
  check_input(who, x, a);
  const int64_t C = x.size(1);
  const bool batch_stats = a.training || !a.running_mean.defined();
  const bool update = a.training && a.running_mean.defined();
  std::shared_ptr<StatsReducer> reducer = batch_stats && a.reducer && a.reducer->world_size() > 1 ? a.reducer : nullptr;
  Tensor xd = x.detach(), w = detached(a.weight), b = detached(a.bias);

  Tensor mean, invstd;  // [C] float64
  double count = C ? static_cast<double>(x.numel() / C) : 0;
  if (batch_stats) {
    Tensor sums = internal::batch_norm_stats(xd);
    if (reducer) std::tie(sums, count) = all_reduce_stats(*reducer, sums, count);
    LOCKSTEP_CHECK(count > 1, who, ": expected more than 1 value per channel when training, got input ", x.shape());
    internal::BatchNormMoments m = internal::batch_norm_moments(sums, count, a.eps);
    mean = m.mean;
    invstd = m.invstd;
    if (update) {
      Tensor rm = a.running_mean, rv = a.running_var, nbt = a.num_batches_tracked;
      if (nbt.defined()) {
        NoGradGuard no_grad;
        internal::copy_(nbt, internal::add(nbt, 1.0));
      }
      const double momentum = a.momentum ? *a.momentum : 1.0 / static_cast<double>(nbt.item<int64_t>());
      update_running(rm, mean, momentum);
      update_running(rv, internal::mul(m.var, count / (count - 1)), momentum);  // unbiased, as PyTorch
    }
  } else {
    mean = internal::to_dtype(a.running_mean.detach(), kFloat64);
    invstd = internal::unary(UnaryOp::Rsqrt, internal::add(internal::to_dtype(a.running_var.detach(), kFloat64), a.eps));
  }
  Tensor y = internal::batch_norm_elemt(xd, mean, invstd, w, b);

  std::vector<Tensor> inputs{x};
  for (const Tensor* t : {&a.weight, &a.bias})
    if (t->defined()) inputs.push_back(*t);
  if (!autograd::needs_grad(inputs)) return y;
  const bool has_w = w.defined(), has_b = b.defined();
  const bool want_x = x.requires_grad(), want_w = has_w && a.weight.requires_grad(),
             want_b = has_b && a.bias.requires_grad();
  return autograd::record("batch_norm", y, inputs, [=](const Tensor& g) {
    // [sum dy, sum dy * (x - mean)] per channel: the bias and weight gradients (this rank's alone, as
    // PyTorch's; DDP averages them), and, over all ranks, the batch statistics' part of dx.
    Tensor sums;
    if (want_w || want_b || (want_x && batch_stats)) sums = internal::batch_norm_backward_reduce(g, xd, mean);
    std::vector<Tensor> grads(1);
    if (want_x) {
      Tensor total;
      if (batch_stats) {
        total = sums;
        if (reducer) {
          total = internal::clone(sums);
          reducer->all_reduce_sum(total);
        }
      }
      grads[0] = internal::batch_norm_backward_elemt(g, xd, mean, invstd, w, total, count);
    }
    if (has_w) grads.push_back(want_w ? internal::to_dtype(internal::mul(internal::select(sums, 0, 1), invstd), w.dtype())
                                      : Tensor());
    // A copy, not a view of `sums`: the gradient may be kept and accumulated into.
    if (has_b) grads.push_back(want_b ? internal::to_dtype(internal::clone(internal::select(sums, 0, 0)), b.dtype())
                                      : Tensor());
    return grads;
  });
}

}  // namespace detail

namespace functional {

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  LOCKSTEP_CHECK(training || (running_mean.defined() && running_var.defined()),
                 "batch_norm: running_mean and running_var are needed when not training");
  return detail::batch_norm("batch_norm", x,
                            {.weight = weight, .bias = bias, .running_mean = running_mean, .running_var = running_var,
                             .num_batches_tracked = Tensor(), .training = training, .momentum = momentum, .eps = eps,
                             .reducer = nullptr});
}

}  // namespace functional
}  // namespace lockstep::nn
