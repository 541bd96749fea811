// Losses composed from log_softmax, gather and reductions, with PyTorch's reduction rules: 'mean'
// over class-index targets divides by the summed weight of the non-ignored targets; over probability
// targets and elementwise losses, by the element count.
#include <algorithm>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "tensor/backend.h"
#include "tensor/factory.h"

namespace lockstep::nn::detail {

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Sum: return sum(loss);
    case Reduction::Mean: return mean(loss);
  }
  return loss;
}

Shape check_broadcast(const char* fn, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b) {
  LOCKSTEP_CHECK(a.defined() && b.defined(), fn, ": got an undefined ", a.defined() ? b_name : a_name);
  LOCKSTEP_CHECK(is_floating_point(a.dtype()), fn, ": expected a floating-point ", a_name, ", got ", a.dtype(), " ",
                 a.shape());
  LOCKSTEP_CHECK(a.device() == b.device(), fn, ": devices differ: ", a_name, " on ", a.device(), ", ", b_name, " on ",
                 b.device());
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const size_t nd = std::max(sa.size(), sb.size());
  Shape out(nd);
  for (size_t k = 0; k < nd; ++k) {
    const int64_t da = k < nd - sa.size() ? 1 : sa[k - (nd - sa.size())];
    const int64_t db = k < nd - sb.size() ? 1 : sb[k - (nd - sb.size())];
    LOCKSTEP_CHECK(da == db || da == 1 || db == 1, fn, ": ", a_name, " ", sa, " and ", b_name, " ", sb,
                   " do not broadcast: the size of ", a_name, " (", da, ") must match the size of ", b_name, " (", db,
                   ") at non-singleton dimension ", k);
    out[k] = da == 1 ? db : da;
  }
  return out;
}

Tensor clamp_min_keeping_grad(const Tensor& x, double min) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = clamp(x.detach(), min);
  }
  return autograd::record("clamp_min_", out, {x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
}

}  // namespace lockstep::nn::detail

namespace lockstep::nn::functional {

namespace amp = autograd::amp;
using amp::AutocastOp;

namespace {

Tensor reduce(const Tensor& per_element, Reduction r) { return detail::reduce_loss(per_element, r); }

// [N, C, d...] -> [N * d..., C] (classes last), the shape gather works on.
Tensor classes_last(const Tensor& x) {
  if (x.dim() == 2) return x;
  std::vector<int64_t> order{0};
  for (int64_t d = 2; d < x.dim(); ++d) order.push_back(d);
  order.push_back(1);
  return reshape(permute(x, order), {-1, x.size(1)});
}

// Class-index targets (on the caller's input, batched or not): the checks shared by cross_entropy and
// nll_loss.
void check_index_target(const char* fn, const Tensor& input, const Tensor& target, const Tensor& weight) {
  Shape expected = input.shape();
  expected.erase(expected.begin() + (input.dim() == 1 ? 0 : 1));
  const int64_t C = input.size(input.dim() == 1 ? 0 : 1);
  LOCKSTEP_CHECK(target.dtype() == kInt64, fn, ": expected int64 class indices ", expected, ", got ", target.dtype(),
                 " target ", target.shape());
  LOCKSTEP_CHECK(target.shape() == expected, fn, ": input ", input.shape(), " needs target ", expected, ", got ",
                 target.shape());
  LOCKSTEP_CHECK(!weight.defined() || weight.shape() == Shape{C}, fn, ": weight ", weight.shape(),
                 " must have one entry per class (", C, ")");
  LOCKSTEP_CHECK(input.device() == target.device(), fn, ": devices differ: input on ", input.device(),
                 ", target on ", target.device());
}

// logp [N, C, d...] and int64 target [N, d...]: PyTorch's nll_loss (weight, ignore_index, reduction)
// plus cross_entropy's label smoothing term.
Tensor nll(const char* fn, const Tensor& logp, const Tensor& target, const Tensor& weight, int64_t ignore_index,
           Reduction reduction, double smoothing) {
  const int64_t C = logp.size(1);
  Tensor lp = classes_last(logp);      // [M, C]
  Tensor t = reshape(target, {-1});     // [M]
  Tensor valid = ne(t, scalar_tensor(static_cast<double>(ignore_index), {kInt64, t.device()}));
  Tensor safe = mul(t, to(valid, kInt64));  // ignored targets read class 0, then weigh 0
  if (supports(safe.device(), Capability::kHostReadable, safe.dtype())) {  // a device's kernels check instead
    std::vector<int64_t> v = safe.to_vector<int64_t>();
    for (size_t i = 0; i < v.size(); ++i)
      LOCKSTEP_CHECK(v[i] >= 0 && v[i] < C, fn, ": target ", v[i], " at position ", i, " is out of range for ", C,
                     " classes (input ", logp.shape(), ", ignore_index ", ignore_index, ")");
  }
  Tensor w = to(valid, lp.dtype());
  if (weight.defined()) w = w * index_select(to(weight, lp.dtype()), 0, safe);
  Tensor loss = -squeeze(gather(lp, 1, unsqueeze(safe, 1)), 1) * w;  // [M]
  Tensor smooth;
  if (smoothing > 0) {
    Tensor weighted = weight.defined() ? lp * reshape(to(weight, lp.dtype()), {1, C}) : lp;
    smooth = -sum(weighted, 1) * to(valid, lp.dtype());  // [M]
  }
  // The loss and the smoothing term reduce alike; 'mean' divides by the summed weight.
  const Tensor total = reduction == Reduction::Mean ? sum(w) : Tensor();
  auto reduced = [&](const Tensor& x) {
    if (reduction == Reduction::None) return reshape(x, target.shape());
    return reduction == Reduction::Sum ? sum(x) : sum(x) / total;
  };
  if (smoothing <= 0) return reduced(loss);
  return reduced(loss) * (1 - smoothing) + reduced(smooth) * (smoothing / static_cast<double>(C));
}

}  // namespace

static Tensor cross_entropy_no_autocast(const Tensor& input_in, const Tensor& target_in, const CrossEntropyLossOptions& o) {
  LOCKSTEP_CHECK(input_in.defined() && target_in.defined(), "cross_entropy: got an undefined tensor");
  LOCKSTEP_CHECK(is_floating_point(input_in.dtype()), "cross_entropy: expected floating-point logits, got ",
                 input_in.dtype());
  LOCKSTEP_CHECK(input_in.dim() >= 1, "cross_entropy: expected input [N, C] or [N, C, d...], got ", input_in.shape());
  LOCKSTEP_CHECK(input_in.device() == target_in.device(), "cross_entropy: devices differ: input on ",
                 input_in.device(), ", target on ", target_in.device());
  const double ls = o.label_smoothing();
  LOCKSTEP_CHECK(ls >= 0 && ls <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ", ls);
  const bool unbatched = input_in.dim() == 1;
  const bool probabilities = is_floating_point(target_in.dtype());
  if (probabilities) {
    Shape indices = input_in.shape();
    indices.erase(indices.begin() + (unbatched ? 0 : 1));
    LOCKSTEP_CHECK(target_in.shape() == input_in.shape(), "cross_entropy: target ", target_in.shape(), " ",
                   target_in.dtype(), " is neither int64 class indices ", indices,
                   " nor probabilities of the input's shape ", input_in.shape());
  } else {
    check_index_target("cross_entropy", input_in, target_in, o.weight());
  }
  Tensor input = unbatched ? unsqueeze(input_in, 0) : input_in;
  Tensor target = unbatched ? unsqueeze(target_in, 0) : target_in;
  const int64_t C = input.size(1);
  Tensor logp = lockstep::log_softmax(input, 1);
  if (probabilities) {
    LOCKSTEP_CHECK(!o.weight().defined() || o.weight().shape() == Shape{C}, "cross_entropy: weight ",
                   o.weight().shape(), " must have one entry per class (", C, ")");
    Tensor p = ls > 0 ? target * (1 - ls) + ls / static_cast<double>(C) : target;
    Tensor prod = logp * p;
    if (o.weight().defined()) {
      Shape s(input.dim(), 1);
      s[1] = C;
      prod = prod * reshape(to(o.weight(), prod.dtype()), s);
    }
    Tensor per = -sum(prod, 1);  // [N, d...]
    if (o.reduction() == Reduction::Mean) return sum(per) / static_cast<double>(per.numel());
    if (o.reduction() == Reduction::Sum) return sum(per);
    return unbatched ? squeeze(per, 0) : per;
  }
  Tensor out = nll("cross_entropy", logp, target, o.weight(), o.ignore_index(), o.reduction(), ls);
  return unbatched && o.reduction() == Reduction::None ? squeeze(out, 0) : out;
}

static Tensor nll_loss_no_autocast(const Tensor& input_in, const Tensor& target_in, const NLLLossOptions& o) {
  LOCKSTEP_CHECK(input_in.defined() && target_in.defined(), "nll_loss: got an undefined tensor");
  LOCKSTEP_CHECK(input_in.dim() >= 1 && is_floating_point(input_in.dtype()),
                 "nll_loss: expected floating-point log-probabilities [N, C] or [N, C, d...], got ",
                 input_in.dtype(), " ", input_in.shape());
  check_index_target("nll_loss", input_in, target_in, o.weight());
  const bool unbatched = input_in.dim() == 1;
  Tensor input = unbatched ? unsqueeze(input_in, 0) : input_in;
  Tensor target = unbatched ? unsqueeze(target_in, 0) : target_in;
  Tensor out = nll("nll_loss", input, target, o.weight(), o.ignore_index(), o.reduction(), 0);
  return unbatched && o.reduction() == Reduction::None ? squeeze(out, 0) : out;
}

static Tensor binary_cross_entropy_with_logits_no_autocast(const Tensor& x, const Tensor& y, const BCEWithLogitsLossOptions& o) {
  LOCKSTEP_CHECK(x.defined() && y.defined(), "binary_cross_entropy_with_logits: got an undefined tensor");
  LOCKSTEP_CHECK(x.shape() == y.shape(), "binary_cross_entropy_with_logits: target ", y.shape(),
                 " must have the input's shape ", x.shape());
  LOCKSTEP_CHECK(is_floating_point(x.dtype()) && is_floating_point(y.dtype()),
                 "binary_cross_entropy_with_logits: expected floating-point input and target, got ", x.dtype(),
                 " and ", y.dtype());
  // -log sigmoid(x) = log(1 + exp(-|x|)) - min(x, 0), stable for any x.
  Tensor neg_log_sigmoid = log(1.0 + exp(-abs(x))) - clamp(x, std::nullopt, 0.0);
  Tensor loss;
  if (o.pos_weight().defined()) {
    Tensor log_weight = (o.pos_weight() - 1.0) * y + 1.0;
    loss = (1.0 - y) * x + log_weight * neg_log_sigmoid;
  } else {
    loss = (1.0 - y) * x + neg_log_sigmoid;
  }
  if (o.weight().defined()) loss = loss * o.weight();
  return reduce(loss, o.reduction());
}

static Tensor binary_cross_entropy_no_autocast(const Tensor& x, const Tensor& y, const BCELossOptions& o) {
  LOCKSTEP_CHECK(x.defined() && y.defined(), "binary_cross_entropy: got an undefined tensor");
  LOCKSTEP_CHECK(x.shape() == y.shape(), "binary_cross_entropy: target ", y.shape(),
                 " must have the input's shape ", x.shape());
  LOCKSTEP_CHECK(is_floating_point(x.dtype()) && x.dtype() == y.dtype(),
                 "binary_cross_entropy: expected floating-point input and target of one dtype, got ", x.dtype(),
                 " and ", y.dtype());
  LOCKSTEP_CHECK(x.device() == y.device(), "binary_cross_entropy: devices differ: input on ", x.device(),
                 ", target on ", y.device());
  // Where values are host-readable: two reductions (NaN fails both), the elements copied only to name one.
  if (supports(x.device(), Capability::kHostReadable, x.dtype()) && x.numel() > 0) {
    NoGradGuard no_grad;
    const double lo = min(x.detach()).item<double>(), hi = max(x.detach()).item<double>();
    if (!(lo >= 0 && hi <= 1)) {
      std::vector<double> v = x.to_vector<double>();
      size_t i = 0;
      while (i + 1 < v.size() && v[i] >= 0 && v[i] <= 1) ++i;
      LOCKSTEP_CHECK(false, "binary_cross_entropy: all elements of input should be between 0 and 1; element ", i,
                     " of input ", x.shape(), " is ", v[i], " (for logits use binary_cross_entropy_with_logits)");
    }
  }
  Tensor w;
  if (o.weight().defined()) {
    w = to(o.weight().detach(), x.dtype());
    // Every trailing dimension of the weight is 1 or the input's: it broadcasts to the input, never widens it.
    bool fits = w.dim() <= x.dim();
    for (int64_t i = 1; fits && i <= w.dim(); ++i) {
      int64_t ws = w.shape()[w.dim() - i], xs = x.shape()[x.dim() - i];
      fits = ws == 1 || ws == xs;
    }
    LOCKSTEP_CHECK(fits, "binary_cross_entropy: weight ", w.shape(), " does not broadcast to the input ", x.shape());
  }
  Tensor loss, log_x, log_1mx;
  {
    NoGradGuard no_grad;
    log_x = clamp(log(x.detach()), -100.0);  // PyTorch clamps each log at -100, so x = 0 or 1 stays finite
    log_1mx = clamp(log(1.0 - x.detach()), -100.0);
    loss = -(y.detach() * log_x + (1.0 - y.detach()) * log_1mx);
    if (w.defined()) loss = loss * w;
  }
  loss = autograd::record("binary_cross_entropy", loss, {x, y},
                          [xd = x.detach(), yd = y.detach(), w, log_x, log_1mx](const Tensor& g) {
                            Tensor gw = w.defined() ? g * w : g;
                            Tensor gx = gw * (xd - yd) / clamp((1.0 - xd) * xd, 1e-12);  // PyTorch's eps
                            return std::vector<Tensor>{gx, gw * (log_1mx - log_x)};
                          });
  return reduce(loss, o.reduction());
}

static Tensor mse_loss_no_autocast(const Tensor& input, const Tensor& target, const MSELossOptions& o) {
  LOCKSTEP_CHECK(input.defined() && target.defined(), "mse_loss: got an undefined tensor");
  LOCKSTEP_CHECK(input.shape() == target.shape(), "mse_loss: input ", input.shape(), " and target ", target.shape(),
                 " differ in shape");
  LOCKSTEP_CHECK(input.dtype() == target.dtype(), "mse_loss: input is ", input.dtype(), " but target is ",
                 target.dtype());
  LOCKSTEP_CHECK(input.device() == target.device(), "mse_loss: devices differ: input on ", input.device(),
                 ", target on ", target.device());
  Tensor d = input - target;
  return reduce(d * d, o.reduction());
}

// Under autocast the losses run in float32 (PyTorch's lists): the operands are cast here, once, and
// the bodies above see the dtypes they would outside autocast.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& o) {
  return cross_entropy_no_autocast(amp::cast_input(AutocastOp::Loss, input), target, o);
}
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& o) {
  return nll_loss_no_autocast(amp::cast_input(AutocastOp::Loss, input), target, o);
}
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const BCEWithLogitsLossOptions& o) {
  const auto xy = amp::cast_inputs(AutocastOp::Loss, input, target);
  return binary_cross_entropy_with_logits_no_autocast(xy[0], xy[1], o);
}
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BCELossOptions& o) {
  const auto xy = amp::cast_inputs(AutocastOp::Loss, input, target);
  return binary_cross_entropy_no_autocast(xy[0], xy[1], o);
}
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& o) {
  const auto xy = amp::cast_inputs(AutocastOp::Loss, input, target);
  return mse_loss_no_autocast(xy[0], xy[1], o);
}

}  // namespace lockstep::nn::functional
