// ReduceLROnPlateau: torch.optim.lr_scheduler.ReduceLROnPlateau. step(metric) after each evaluation;
// when the metric has not improved (by threshold, relative or absolute) for more than patience steps,
// every group's lr becomes max(lr * factor, min_lr) (unless that changes it by eps or less), and the
// next cooldown steps count no bad epochs:
//   optim::ReduceLROnPlateau plateau(opt, optim::ReduceLROnPlateauOptions().mode("max").patience(2));
//   plateau.step(val_accuracy);
// Unlike the epoch schedulers (lr_scheduler.h) it needs no initial step and records no initial_lr, as
// PyTorch's. The optimizer must outlive it. LibTorch's spelling, ReduceLROnPlateauScheduler with its
// SchedulerMode / ThresholdMode enums and positional arguments, is below.
//
// state_dict() is flat tensors under PyTorch's attribute names: best, mode_worse, factor, threshold,
// eps (float64 []), patience, cooldown, cooldown_counter, num_bad_epochs, last_epoch (int64 []),
// min_lrs and _last_lr (float64 [groups]). mode and threshold_mode are the scheduler's own (load checks
// that mode_worse agrees with mode).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct ReduceLROnPlateauOptions {
  // "min": lower is better; "max": higher is better.
  LOCKSTEP_ARG(std::string, mode, "min");
  LOCKSTEP_ARG(double, factor, 0.1);
  LOCKSTEP_ARG(int64_t, patience, 10);
  LOCKSTEP_ARG(double, threshold, 1e-4);
  // "rel": better than best * (1 -/+ threshold); "abs": better than best -/+ threshold.
  LOCKSTEP_ARG(std::string, threshold_mode, "rel");
  LOCKSTEP_ARG(int64_t, cooldown, 0);
  LOCKSTEP_ARG(double, eps, 1e-8);

 public:
  // One lower bound for every group (also for groups added later), or one per group.
  ReduceLROnPlateauOptions& min_lr(double v) {
    min_lrs_ = {v};
    per_group_ = false;
    return *this;
  }
  ReduceLROnPlateauOptions& min_lr(std::vector<double> v) {
    min_lrs_ = std::move(v);
    per_group_ = true;
    return *this;
  }
  const std::vector<double>& min_lrs() const { return min_lrs_; }
  bool min_lr_per_group() const { return per_group_; }

 private:
  std::vector<double> min_lrs_{0.0};
  bool per_group_ = false;
};

class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  virtual ~ReduceLROnPlateau() = default;
  ReduceLROnPlateau(const ReduceLROnPlateau&) = delete;
  ReduceLROnPlateau& operator=(const ReduceLROnPlateau&) = delete;

  // One evaluation's metric (NaN counts as no improvement).
  void step(double metric);

  Optimizer& optimizer() const { return *optimizer_; }
  const ReduceLROnPlateauOptions& options() const { return options_; }
  // The lrs after the last step (before any: the optimizer's), one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }

  StateDict state_dict() const;
  // Restores what state_dict saved (missing keys, another group count or another mode are errors).
  void load_state_dict(const StateDict& state);

 private:
  bool is_better(double a, double best) const;
  void reduce_lr();
  std::vector<double> group_lrs() const;

  Optimizer* optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_, last_lr_;
  double mode_worse_, best_;
  int64_t last_epoch_ = 0, cooldown_counter_ = 0, num_bad_epochs_ = 0;
};

// LibTorch's torch::optim::ReduceLROnPlateauScheduler: the same scheduler with positional arguments.
// An empty min_lr means 0 for every group; verbose is accepted and ignored.
class ReduceLROnPlateauScheduler : public ReduceLROnPlateau {
 public:
  enum SchedulerMode { min, max };
  enum ThresholdMode { rel, abs };
  explicit ReduceLROnPlateauScheduler(Optimizer& optimizer, SchedulerMode mode = min, double factor = 0.1,
                                      int patience = 10, double threshold = 1e-4, ThresholdMode threshold_mode = rel,
                                      int cooldown = 0, const std::vector<float>& min_lr = std::vector<float>(),
                                      double eps = 1e-8, bool verbose = false);
};

}  // namespace lockstep::optim
