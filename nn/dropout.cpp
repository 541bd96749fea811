// The channel and alpha dropouts, as ATen's feature_dropout / alpha_dropout: a Bernoulli(1 - p) mask, of the
// input's shape or [N, C, 1, ...] for the channel variants, drawn from the default generator; the input
// times the (scaled) mask, plus alpha dropout's shift, so the gradient is the scaled mask.
#include "nn/dropout.h"

#include <cmath>
#include <ostream>

#include "tensor/factory.h"

namespace lockstep::nn::functional {

namespace {

// SELU's scale * alpha: the value a dropped unit takes before alpha dropout's affine correction.
constexpr double kSeluNegativeSaturation = 1.7580993408473766;

void check_p(const char* fn, double p) {
  LOCKSTEP_CHECK(p >= 0 && p <= 1, fn, ": dropout probability has to be between 0 and 1, but got ", p);
}

// 1 (keep) with probability 1 - p, else 0, of shape [N, C, 1, ...] (per channel) or the input's.
Tensor keep_mask(const Tensor& x, double p, bool per_channel) {
  Shape s = x.shape();
  if (per_channel)
    for (size_t d = 2; d < s.size(); ++d) s[d] = 1;
  return bernoulli(full(s, 1 - p, {x.dtype(), x.device()}));
}

// x: [N, C, ...] (a leading 1 added for unbatched input by the callers).
Tensor dropout_impl(const char* fn, const Tensor& x, double p, bool training, bool alpha, bool per_channel) {
  check_p(fn, p);
  LOCKSTEP_CHECK(x.defined(), fn, ": got an undefined tensor");
  LOCKSTEP_CHECK(!per_channel || x.dim() >= 2, fn,
                 ": Feature dropout requires at least 2 dimensions in the input, got ",
                 x.shape());
  LOCKSTEP_CHECK(x.is_floating_point(), fn, ": expected a floating-point input, got ", dtype_name(x.dtype()));
  if (p == 0 || !training || x.numel() == 0) return x;
  if (p == 1) return mul(x, 0.0);
  const Tensor keep = keep_mask(x, p, per_channel);
  if (!alpha) return mul(x, mul(keep, 1.0 / (1.0 - p)));
  const double a = 1.0 / std::sqrt((kSeluNegativeSaturation * kSeluNegativeSaturation * p + 1) * (1 - p));
  // kept: a x + alpha a p; dropped: -alpha a + alpha a p.
  const Tensor shift = add(mul(keep, kSeluNegativeSaturation * a), kSeluNegativeSaturation * a * (p - 1));
  return add(mul(x, mul(keep, a)), shift);
}

// dropout1d/2d/3d: [N, C, spatial...] with `spatial` dimensions, or the same without N.
Tensor channel_dropout(const char* fn, const Tensor& x, int64_t spatial, const DropoutFuncOptions& o) {
  LOCKSTEP_CHECK(x.defined() && (x.dim() == spatial + 1 || x.dim() == spatial + 2), fn, ": Expected ", spatial + 1,
                 "D or ", spatial + 2, "D input, but received a ", x.defined() ? x.dim() : 0, "D input. Note that ", fn,
                 " exists to provide channel-wise dropout on inputs with ", spatial, " spatial dimension",
                 spatial > 1 ? "s" : "", ", a channel dimension, and an optional batch dimension (i.e. ", spatial + 1,
                 "D or ", spatial + 2, "D inputs).");
  const bool batched = x.dim() == spatial + 2;
  Tensor y = dropout_impl(fn, batched ? x : unsqueeze(x, 0), o.p(), o.training(), false, true);
  return batched ? y : squeeze(y, 0);
}

}  // namespace

Tensor dropout1d(const Tensor& x, const Dropout1dFuncOptions& o) { return channel_dropout("dropout1d", x, 1, o); }
Tensor dropout2d(const Tensor& x, const Dropout2dFuncOptions& o) { return channel_dropout("dropout2d", x, 2, o); }
Tensor dropout3d(const Tensor& x, const Dropout3dFuncOptions& o) { return channel_dropout("dropout3d", x, 3, o); }

Tensor alpha_dropout(const Tensor& x, const AlphaDropoutFuncOptions& o) {
  return dropout_impl("alpha_dropout", x, o.p(), o.training(), true, false);
}

Tensor feature_alpha_dropout(const Tensor& x, const FeatureAlphaDropoutFuncOptions& o) {
  return dropout_impl("feature_alpha_dropout", x, o.p(), o.training(), true, true);
}

}  // namespace lockstep::nn::functional

namespace lockstep::nn {

void DropoutImpl::pretty_print(std::ostream& os) const { os << "Dropout(p=" << p << ")"; }

}  // namespace lockstep::nn
