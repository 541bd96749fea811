// The schedules of lr_scheduler.h (StepLR, MultiStepLR, CosineAnnealingLR, LinearLR, LambdaLR,
// OneCycleLR): each get_lr/closed_form_lr is PyTorch's expression in the same order of operations,
// Python's floor division and modulo included.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

#include "optim/adam.h"
#include "optim/sgd.h"

namespace lockstep::optim {
namespace {

constexpr double kPi = 3.141592653589793;  // math.pi

// Python's a % b and a // b for b > 0 (the results of C++'s are negative for negative a).
int64_t py_mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }
int64_t py_floordiv(int64_t a, int64_t b) { return (a - py_mod(a, b)) / b; }

// Each lr times factor, as PyTorch's `[lr * factor for lr in lrs]`.
std::vector<double> times(std::vector<double> lrs, double factor) {
  for (double& lr : lrs) lr = lr * factor;
  return lrs;
}

}  // namespace

// --- StepLR ---

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler("StepLR", optimizer, last_epoch), step_size_(step_size), gamma_(gamma) {
  LOCKSTEP_CHECK(step_size > 0, "StepLR: invalid step_size ", step_size, " (expected a positive number of epochs)");
  LOCKSTEP_CHECK(std::isfinite(gamma) && gamma >= 0, "StepLR: invalid gamma ", gamma);
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  if (last_epoch_ == 0 || py_mod(last_epoch_, step_size_) != 0) return group_lrs();
  return times(group_lrs(), gamma_);
}

std::vector<double> StepLR::closed_form_lr() {
  return times(base_lrs_, std::pow(gamma_, static_cast<double>(py_floordiv(last_epoch_, step_size_))));
}

void StepLR::visit(Fields& f) {
  LRScheduler::visit(f);
  f.field("step_size", step_size_);
  f.field("gamma", gamma_);
}

// --- MultiStepLR ---

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma, int64_t last_epoch)
    : LRScheduler("MultiStepLR", optimizer, last_epoch), milestones_(std::move(milestones)), gamma_(gamma) {
  LOCKSTEP_CHECK(std::isfinite(gamma) && gamma >= 0, "MultiStepLR: invalid gamma ", gamma);
  for (int64_t m : milestones_) LOCKSTEP_CHECK(m >= 0, "MultiStepLR: invalid milestone ", m);
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return group_lrs();
  return times(group_lrs(), std::pow(gamma_, static_cast<double>(count)));
}

std::vector<double> MultiStepLR::closed_form_lr() {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  return times(base_lrs_, std::pow(gamma_, static_cast<double>(passed)));
}

void MultiStepLR::visit(Fields& f) {
  LRScheduler::visit(f);
  f.field("milestones", milestones_);
  f.field("gamma", gamma_);
}

// --- CosineAnnealingLR ---

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min, int64_t last_epoch)
    : LRScheduler("CosineAnnealingLR", optimizer, last_epoch), T_max_(T_max), eta_min_(eta_min) {
  LOCKSTEP_CHECK(T_max > 0, "CosineAnnealingLR: invalid T_max ", T_max, " (expected a positive number of epochs)");
  LOCKSTEP_CHECK(std::isfinite(eta_min) && eta_min >= 0, "CosineAnnealingLR: invalid eta_min ", eta_min);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  const double e = static_cast<double>(last_epoch_), T = static_cast<double>(T_max_);
  if (is_initial_) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {
    for (size_t g = 0; g < lrs.size(); ++g)
      lrs[g] = eta_min_ + (base_lrs_[g] - eta_min_) * (1 + std::cos(e * kPi / T)) / 2;
  } else if (py_mod(last_epoch_ - 1 - T_max_, 2 * T_max_) == 0) {
    for (size_t g = 0; g < lrs.size(); ++g)
      lrs[g] = lrs[g] + (base_lrs_[g] - eta_min_) * (1 - std::cos(kPi / T)) / 2;
  } else {
    for (double& lr : lrs)
      lr = (1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T)) * (lr - eta_min_) + eta_min_;
  }
  return lrs;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() {
  const double e = static_cast<double>(last_epoch_), T = static_cast<double>(T_max_);
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(kPi * e / T)) / 2);
  return lrs;
}

void CosineAnnealingLR::visit(Fields& f) {
  LRScheduler::visit(f);
  f.field("T_max", T_max_);
  f.field("eta_min", eta_min_);
}

// --- LinearLR ---

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters,
                   int64_t last_epoch)
    : LRScheduler("LinearLR", optimizer, last_epoch),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  LOCKSTEP_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: invalid start_factor ", start_factor,
                 " (expected (0, 1])");
  LOCKSTEP_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: invalid end_factor ", end_factor,
                 " (expected [0, 1])");
  LOCKSTEP_CHECK(total_iters > 0, "LinearLR: invalid total_iters ", total_iters, " (expected a positive number)");
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  if (last_epoch_ == 0) return times(group_lrs(), start_factor_);
  if (is_initial_ || last_epoch_ > total_iters_) return group_lrs();
  const double d = end_factor_ - start_factor_;
  return times(group_lrs(),
               1.0 + d / (static_cast<double>(total_iters_) * start_factor_ + static_cast<double>(last_epoch_ - 1) * d));
}

std::vector<double> LinearLR::closed_form_lr() {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  return times(base_lrs_, start_factor_ + (end_factor_ - start_factor_) * done / static_cast<double>(total_iters_));
}

void LinearLR::visit(Fields& f) {
  LRScheduler::visit(f);
  f.field("start_factor", start_factor_);
  f.field("end_factor", end_factor_);
  f.field("total_iters", total_iters_);
}

// --- LambdaLR ---

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda, int64_t last_epoch)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.num_param_groups(), lr_lambda), last_epoch) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas, int64_t last_epoch)
    : LRScheduler("LambdaLR", optimizer, last_epoch), lr_lambdas_(std::move(lr_lambdas)) {
  LOCKSTEP_CHECK(lr_lambdas_.size() == optimizer.num_param_groups(), "LambdaLR: expected ",
                 optimizer.num_param_groups(), " lr_lambdas (one per param group), got ", lr_lambdas_.size());
  for (size_t g = 0; g < lr_lambdas_.size(); ++g)
    LOCKSTEP_CHECK(static_cast<bool>(lr_lambdas_[g]), "LambdaLR: lr_lambda ", g, " is empty");
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) lrs.push_back(base_lrs_[g] * lr_lambdas_[g](last_epoch_));
  return lrs;
}

// --- OneCycleLR ---

namespace {
// One value per group: a single value for every group, or one each (PyTorch's _format_param).
std::vector<double> per_group(const std::string& who, const char* what, const std::vector<double>& v, size_t groups) {
  if (v.size() == 1) return std::vector<double>(groups, v[0]);
  LOCKSTEP_CHECK(v.size() == groups, who, ": expected ", groups, " values for ", what, ", got ", v.size());
  return v;
}
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& o, int64_t last_epoch)
    : LRScheduler("OneCycleLR", optimizer, last_epoch) {
  if (o.total_steps_ != -1) {
    LOCKSTEP_CHECK(o.total_steps_ > 0, name_, ": expected positive integer total_steps, but got ", o.total_steps_);
    total_steps_ = o.total_steps_;
  } else {
    LOCKSTEP_CHECK(o.epochs_ != -1 && o.steps_per_epoch_ != -1, name_,
                   ": you must define either total_steps OR (epochs AND steps_per_epoch)");
    LOCKSTEP_CHECK(o.epochs_ > 0, name_, ": expected positive integer epochs, but got ", o.epochs_);
    LOCKSTEP_CHECK(o.steps_per_epoch_ > 0, name_, ": expected positive integer steps_per_epoch, but got ",
                   o.steps_per_epoch_);
    total_steps_ = o.epochs_ * o.steps_per_epoch_;
  }
  LOCKSTEP_CHECK(o.pct_start_ >= 0 && o.pct_start_ <= 1, name_, ": expected float between 0 and 1 pct_start, but got ",
                 o.pct_start_);
  LOCKSTEP_CHECK(o.anneal_strategy_ == "cos" || o.anneal_strategy_ == "linear", name_,
                 ": anneal_strategy must be one of 'cos' or 'linear', instead got '", o.anneal_strategy_, "'");
  LOCKSTEP_CHECK(o.div_factor_ > 0 && o.final_div_factor_ > 0, name_, ": div_factor (", o.div_factor_,
                 ") and final_div_factor (", o.final_div_factor_, ") must be positive");
  linear_ = o.anneal_strategy_ == "linear";
  const double T = static_cast<double>(total_steps_), p = o.pct_start_;
  if (o.three_phase_) {
    phases_ = {{p * T - 1, 0, 1, 0, 1}, {2 * p * T - 2, 1, 0, 1, 0}, {T - 1, 0, 2, 0, 0}};
  } else {
    phases_ = {{p * T - 1, 0, 1, 0, 1}, {T - 1, 1, 2, 1, 0}};
  }
  const size_t groups = optimizer.num_param_groups();
  max_lrs_ = per_group(name_, "max_lr", o.max_lrs_, groups);
  for (size_t g = 0; g < groups; ++g) {
    LOCKSTEP_CHECK(max_lrs_[g] >= 0, name_, ": max_lr of group ", g, " must be non-negative, got ", max_lrs_[g]);
    initial_lrs_.push_back(max_lrs_[g] / o.div_factor_);
    min_lrs_.push_back(initial_lrs_[g] / o.final_div_factor_);
    if (last_epoch == -1) {  // PyTorch sets group["initial_lr"] itself, whatever was there
      optimizer.set_initial_lr(g, initial_lrs_[g]);
      base_lrs_[g] = initial_lrs_[g];
    }
  }
  cycle_momentum_ = o.cycle_momentum_;
  use_beta1_ = dynamic_cast<OptimizerWithOptions<AdamOptions>*>(&optimizer) != nullptr;
  if (cycle_momentum_) {
    LOCKSTEP_CHECK(use_beta1_ || dynamic_cast<OptimizerWithOptions<SGDOptions>*>(&optimizer) != nullptr, name_,
                   ": optimizer ", optimizer.name(), " must support momentum or beta1 with the cycle_momentum option "
                   "enabled (SGD, Adam, AdamW; or cycle_momentum(false))");
    max_momentums_.assign(groups, o.max_momentum_);
    base_momentums_.assign(groups, o.base_momentum_);
    if (last_epoch == -1)
      for (size_t g = 0; g < groups; ++g) set_momentum(g, max_momentums_[g]);
  }
  initial_step();
}

double OneCycleLR::momentum(size_t g) const {
  if (use_beta1_) return dynamic_cast<OptimizerWithOptions<AdamOptions>&>(*optimizer_).options(g).betas()[0];
  return dynamic_cast<OptimizerWithOptions<SGDOptions>&>(*optimizer_).options(g).momentum();
}

void OneCycleLR::set_momentum(size_t g, double m) {
  if (use_beta1_) {
    AdamOptions& o = dynamic_cast<OptimizerWithOptions<AdamOptions>&>(*optimizer_).options(g);
    o.betas(m, o.betas()[1]);
  } else {
    dynamic_cast<OptimizerWithOptions<SGDOptions>&>(*optimizer_).options(g).momentum(m);
  }
}

std::vector<double> OneCycleLR::get_last_momentum() const {
  std::vector<double> out;
  if (cycle_momentum_)
    for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) out.push_back(momentum(g));
  return out;
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step_num = last_epoch_;
  LOCKSTEP_CHECK(step_num <= total_steps_, name_, ": tried to step ", step_num,
                 " times. The specified number of total steps is ", total_steps_);
  // PyTorch's _annealing_cos and _annealing_linear.
  auto anneal = [&](double start, double end, double pct) {
    if (linear_) return (end - start) * pct + start;
    const double cos_out = std::cos(kPi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  };
  std::vector<double> lrs;
  for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) {
    const double lr_of[3] = {initial_lrs_[g], max_lrs_[g], min_lrs_[g]};
    const double momentum_of[2] = {cycle_momentum_ ? max_momentums_[g] : 0, cycle_momentum_ ? base_momentums_[g] : 0};
    double start_step = 0, lr = 0, m = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& ph = phases_[i];
      if (static_cast<double>(step_num) <= ph.end_step || i + 1 == phases_.size()) {
        const double pct = (static_cast<double>(step_num) - start_step) / (ph.end_step - start_step);
        lr = anneal(lr_of[ph.start_lr], lr_of[ph.end_lr], pct);
        if (cycle_momentum_) m = anneal(momentum_of[ph.start_momentum], momentum_of[ph.end_momentum], pct);
        break;
      }
      start_step = ph.end_step;
    }
    lrs.push_back(lr);
    if (cycle_momentum_) set_momentum(g, m);
  }
  return lrs;
}

void OneCycleLR::visit(Fields& f) {
  LRScheduler::visit(f);
  f.field("total_steps", total_steps_);
  f.field("anneal_linear", linear_);
  f.field("cycle_momentum", cycle_momentum_);
  f.field("use_beta1", use_beta1_);
  f.field("initial_lrs", initial_lrs_);
  f.field("max_lrs", max_lrs_);
  f.field("min_lrs", min_lrs_);
  f.field("max_momentums", max_momentums_);
  f.field("base_momentums", base_momentums_);
}

}  // namespace lockstep::optim
