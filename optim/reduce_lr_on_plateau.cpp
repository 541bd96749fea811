// ReduceLROnPlateau (reduce_lr_on_plateau.h): PyTorch's step, _is_better and _reduce_lr, expression for
// expression, and the flat state_dict.
#include "optim/reduce_lr_on_plateau.h"

#include <cmath>
#include <limits>
#include <map>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

namespace {

constexpr const char* kName = "ReduceLROnPlateau";

ReduceLROnPlateauOptions checked(ReduceLROnPlateauOptions o, size_t groups) {
  LOCKSTEP_CHECK(o.factor() < 1.0, kName, ": Factor should be < 1.0. (got ", o.factor(), ")");
  LOCKSTEP_CHECK(o.mode() == "min" || o.mode() == "max", kName, ": mode ", o.mode(), " is unknown!");
  LOCKSTEP_CHECK(o.threshold_mode() == "rel" || o.threshold_mode() == "abs", kName, ": threshold mode ",
                 o.threshold_mode(), " is unknown!");
  LOCKSTEP_CHECK(o.patience() >= 0 && o.cooldown() >= 0, kName, ": patience and cooldown must be at least 0, got ",
                 o.patience(), " and ", o.cooldown());
  if (o.min_lr_per_group())
    LOCKSTEP_CHECK(o.min_lrs().size() == groups, kName, ": expected ", groups, " min_lrs, got ", o.min_lrs().size());
  return o;
}

const Tensor& entry(const std::map<std::string, Tensor>& in, const std::string& key) {
  auto it = in.find(key);
  LOCKSTEP_CHECK(it != in.end(), kName, ".load_state_dict: missing '", key, "'");
  return it->second;
}

double number(const std::map<std::string, Tensor>& in, const std::string& key) {
  const Tensor& t = entry(in, key);
  LOCKSTEP_CHECK(t.numel() == 1, kName, ".load_state_dict: '", key, "' should be one number, got shape ", t.shape());
  return internal::to_dtype(t, kFloat64).item<double>();
}

std::vector<double> numbers(const std::map<std::string, Tensor>& in, const std::string& key, size_t groups) {
  const Tensor& t = entry(in, key);
  LOCKSTEP_CHECK(t.dim() == 1 && t.numel() == static_cast<int64_t>(groups), kName, ".load_state_dict: '", key,
                 "' should hold one number per param group (", groups, "), got shape ", t.shape());
  return internal::to_dtype(t, kFloat64).to_vector<double>();
}

Tensor f64(double v) { return scalar_tensor(v, TensorOptions(kFloat64)); }
Tensor i64(int64_t v) { return tensor({v}, {}); }
Tensor f64s(const std::vector<double>& v) { return tensor(v, {static_cast<int64_t>(v.size())}); }

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(&optimizer), options_(checked(std::move(options), optimizer.num_param_groups())) {
  min_lrs_ = options_.min_lr_per_group() ? options_.min_lrs()
                                         : std::vector<double>(optimizer.num_param_groups(), options_.min_lrs()[0]);
  last_lr_ = group_lrs();
  mode_worse_ = options_.mode() == "min" ? std::numeric_limits<double>::infinity()
                                         : -std::numeric_limits<double>::infinity();
  best_ = mode_worse_;
}

std::vector<double> ReduceLROnPlateau::group_lrs() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) lrs.push_back(optimizer_->lr(g));
  return lrs;
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const double threshold = options_.threshold();
  const bool rel = options_.threshold_mode() == "rel";
  if (options_.mode() == "min") return rel ? a < best * (1.0 - threshold) : a < best - threshold;
  return rel ? a > best * (threshold + 1.0) : a > best + threshold;
}

void ReduceLROnPlateau::step(double metric) {
  last_epoch_ += 1;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    num_bad_epochs_ += 1;
  }
  if (in_cooldown()) {
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience()) {
    reduce_lr();
    cooldown_counter_ = options_.cooldown();
    num_bad_epochs_ = 0;
  }
  last_lr_ = group_lrs();
}

void ReduceLROnPlateau::reduce_lr() {
  const size_t groups = optimizer_->num_param_groups();
  if (min_lrs_.size() != groups) {
    LOCKSTEP_CHECK(!options_.min_lr_per_group(), kName, ": The number of param groups in the `optimizer` (", groups,
                   ") differs from when `ReduceLROnPlateau` was initialized (", min_lrs_.size(), "), usually due to ",
                   "a new param group being added to the optimizer. Please modify the `min_lrs` field to match the ",
                   "length of the `optimizer` param groups.");
    min_lrs_.assign(groups, options_.min_lrs()[0]);
  }
  for (size_t g = 0; g < groups; ++g) {
    const double old_lr = optimizer_->lr(g), scaled = old_lr * options_.factor();
    const double new_lr = min_lrs_[g] > scaled ? min_lrs_[g] : scaled;  // Python's max(scaled, min_lr)
    if (old_lr - new_lr > options_.eps()) optimizer_->set_lr(g, new_lr);
  }
}

StateDict ReduceLROnPlateau::state_dict() const {
  const ReduceLROnPlateauOptions& o = options_;
  return {{"_last_lr", f64s(last_lr_)},      {"best", f64(best_)},
          {"cooldown", i64(o.cooldown())},   {"cooldown_counter", i64(cooldown_counter_)},
          {"eps", f64(o.eps())},             {"factor", f64(o.factor())},
          {"last_epoch", i64(last_epoch_)},  {"min_lrs", f64s(min_lrs_)},
          {"mode_worse", f64(mode_worse_)},  {"num_bad_epochs", i64(num_bad_epochs_)},
          {"patience", i64(o.patience())},   {"threshold", f64(o.threshold())}};
}

void ReduceLROnPlateau::load_state_dict(const StateDict& state) {
  std::map<std::string, Tensor> in(state.begin(), state.end());
  const size_t groups = optimizer_->num_param_groups();
  LOCKSTEP_CHECK(number(in, "mode_worse") == mode_worse_, kName, ".load_state_dict: the state_dict is for mode '",
                 options_.mode() == "min" ? "max" : "min", "', this scheduler's mode is '", options_.mode(), "'");
  ReduceLROnPlateauOptions o = options_;
  o.factor(number(in, "factor")).patience(static_cast<int64_t>(number(in, "patience")));
  o.threshold(number(in, "threshold")).cooldown(static_cast<int64_t>(number(in, "cooldown"))).eps(number(in, "eps"));
  std::vector<double> min_lrs = numbers(in, "min_lrs", groups), last_lr = numbers(in, "_last_lr", groups);
  options_ = checked(o, groups);
  min_lrs_ = std::move(min_lrs);
  last_lr_ = std::move(last_lr);
  best_ = number(in, "best");
  cooldown_counter_ = static_cast<int64_t>(number(in, "cooldown_counter"));
  num_bad_epochs_ = static_cast<int64_t>(number(in, "num_bad_epochs"));
  last_epoch_ = static_cast<int64_t>(number(in, "last_epoch"));
}

namespace {

ReduceLROnPlateauOptions libtorch_options(ReduceLROnPlateauScheduler::SchedulerMode mode, double factor, int patience,
                                          double threshold, ReduceLROnPlateauScheduler::ThresholdMode threshold_mode,
                                          int cooldown, const std::vector<float>& min_lr, double eps) {
  ReduceLROnPlateauOptions o;
  o.mode(mode == ReduceLROnPlateauScheduler::min ? "min" : "max").factor(factor).patience(patience);
  o.threshold(threshold).threshold_mode(threshold_mode == ReduceLROnPlateauScheduler::rel ? "rel" : "abs");
  o.cooldown(cooldown).eps(eps);
  if (!min_lr.empty()) o.min_lr(std::vector<double>(min_lr.begin(), min_lr.end()));
  return o;
}

}  // namespace

ReduceLROnPlateauScheduler::ReduceLROnPlateauScheduler(Optimizer& optimizer, SchedulerMode mode, double factor,
                                                       int patience, double threshold, ThresholdMode threshold_mode,
                                                       int cooldown, const std::vector<float>& min_lr, double eps,
                                                       bool /*verbose*/)
    : ReduceLROnPlateau(optimizer,
                        libtorch_options(mode, factor, patience, threshold, threshold_mode, cooldown, min_lr, eps)) {}

}  // namespace lockstep::optim
