// Learning-rate schedulers, as torch.optim.lr_scheduler: each computes the next lr of every param group
// the way PyTorch computes it (the recursive "chainable" form on step(), the closed form where
// SequentialLR restarts a scheduler at a milestone), so the sequences equal PyTorch's to the last bit
// of double arithmetic.
//
// Contract, as PyTorch: a scheduler refers to its optimizer, which must outlive it. Building one records each group's "initial_lr" (the first scheduler
// built on an optimizer wins) and performs an initial step that sets the lrs for epoch 0; call step()
// after optimizer.step(). To resume, build the scheduler as in the first run, then load_state_dict
// (after the optimizer's load_state_dict).
//
// state_dict() is flat tensors, PyTorch's attribute names: last_epoch and _step_count (int64 []),
// base_lrs and _last_lr (float64 [groups]), and each scheduler's own settings (step_size, gamma,
// milestones, T_max, eta_min, ...), which load_state_dict restores too, as PyTorch's __dict__.update.
// SequentialLR nests its schedulers' under "_schedulers.<k>.". LambdaLR's functions are not saved.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace lockstep::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // "StepLR", "CosineAnnealingLR", ...: the prefix of every error.
  const std::string& name() const { return name_; }
  Optimizer& optimizer() const { return *optimizer_; }
  // Advances one epoch (or iteration) and writes the new lrs into the optimizer's groups.
  virtual void step();
  // The lrs the last step set, one per param group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  StateDict state_dict() const;
  // Restores the state saved by state_dict() (the lrs in the optimizer are not touched: they come with
  // the optimizer's own state_dict). Missing keys and a different number of groups are errors.
  void load_state_dict(const StateDict& state);

  // The fields of the state_dict, visited by save and load.
  struct Fields {
    virtual ~Fields() = default;
    virtual void field(const std::string& key, int64_t& v) = 0;
    virtual void field(const std::string& key, double& v) = 0;
    virtual void field(const std::string& key, std::vector<int64_t>& v) = 0;
    virtual void field(const std::string& key, std::vector<double>& v) = 0;
  };

 protected:
  // last_epoch -1 starts fresh; another value resumes and needs every group's initial_lr.
  LRScheduler(std::string name, Optimizer& optimizer, int64_t last_epoch = -1);
  // PyTorch's _initial_step: derived constructors call it last (a base constructor cannot call get_lr).
  void initial_step();
  // PyTorch's get_lr (the chainable form, reading the groups' current lrs) and, where PyTorch has one,
  // _get_closed_form_lr (empty: none).
  virtual std::vector<double> get_lr() = 0;
  virtual std::vector<double> closed_form_lr() { return {}; }
  // PyTorch's _update_lr: epoch < 0 advances last_epoch by one and uses get_lr; otherwise sets it and
  // uses the closed form where there is one.
  void update_lr(int64_t epoch = -1);
  // Every field of the state_dict; derived classes add theirs after calling this.
  virtual void visit(Fields& f);
  std::vector<double> group_lrs() const;

  Optimizer* optimizer_;
  std::string name_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  bool is_initial_ = false;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;

  friend class SequentialLR;
};

// lr * gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  void visit(Fields& f) override;
  int64_t step_size_;
  double gamma_;
};

// lr * gamma at each milestone (a milestone listed twice multiplies twice).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  void visit(Fields& f) override;
  std::vector<int64_t> milestones_;  // sorted, with repeats
  double gamma_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, by PyTorch's recursion.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  void visit(Fields& f) override;
  int64_t T_max_;
  double eta_min_;
};

// The factor goes linearly from start_factor to end_factor over total_iters epochs (warmup).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5,
           int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<double> closed_form_lr() override;
  void visit(Fields& f) override;
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// base_lr * lr_lambda(epoch); one function for every group or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda, int64_t last_epoch = -1);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::vector<Lambda> lr_lambdas_;
};

// The 1cycle policy, as torch.optim.lr_scheduler.OneCycleLR, stepped once per batch: the lr anneals
// from max_lr / div_factor up to max_lr over the first pct_start of total_steps, then down to
// initial_lr / final_div_factor (three_phase: back to initial_lr first, then down); momentum (SGD's
// momentum, Adam's and AdamW's beta1) goes the opposite way between max_momentum and base_momentum.
// Building it sets each group's initial_lr to max_lr / div_factor (and, with cycle_momentum, its
// momentum to max_momentum), as PyTorch's. Stepping past total_steps is an error.
//   optim::OneCycleLR sched(opt, optim::OneCycleLROptions(0.1).epochs(30).steps_per_epoch(len(loader)));
struct OneCycleLROptions {
  OneCycleLROptions(double max_lr) : max_lrs_{max_lr} {}                     // NOLINT: every group
  OneCycleLROptions(std::vector<double> max_lrs) : max_lrs_(std::move(max_lrs)) {}  // NOLINT: one per group
  // Either total_steps, or epochs and steps_per_epoch (total_steps = epochs * steps_per_epoch).
  OneCycleLROptions& total_steps(int64_t v) { total_steps_ = v; return *this; }
  OneCycleLROptions& epochs(int64_t v) { epochs_ = v; return *this; }
  OneCycleLROptions& steps_per_epoch(int64_t v) { steps_per_epoch_ = v; return *this; }
  OneCycleLROptions& pct_start(double v) { pct_start_ = v; return *this; }
  OneCycleLROptions& anneal_strategy(std::string v) { anneal_strategy_ = std::move(v); return *this; }  // "cos" | "linear"
  OneCycleLROptions& cycle_momentum(bool v) { cycle_momentum_ = v; return *this; }
  OneCycleLROptions& base_momentum(double v) { base_momentum_ = v; return *this; }
  OneCycleLROptions& max_momentum(double v) { max_momentum_ = v; return *this; }
  OneCycleLROptions& div_factor(double v) { div_factor_ = v; return *this; }
  OneCycleLROptions& final_div_factor(double v) { final_div_factor_ = v; return *this; }
  OneCycleLROptions& three_phase(bool v) { three_phase_ = v; return *this; }

  std::vector<double> max_lrs_;
  int64_t total_steps_ = -1, epochs_ = -1, steps_per_epoch_ = -1;
  double pct_start_ = 0.3;
  std::string anneal_strategy_ = "cos";
  bool cycle_momentum_ = true;
  double base_momentum_ = 0.85, max_momentum_ = 0.95;
  double div_factor_ = 25, final_div_factor_ = 1e4;
  bool three_phase_ = false;
};

class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options, int64_t last_epoch = -1);
  int64_t total_steps() const { return total_steps_; }
  // The momentum (or beta1) each group got from the last step.
  std::vector<double> get_last_momentum() const;

 protected:
  std::vector<double> get_lr() override;
  void visit(Fields& f) override;
  // group g's momentum (SGD) or beta1 (Adam, AdamW), read and written through the optimizer's options.
  double momentum(size_t g) const;
  void set_momentum(size_t g, double m);

  struct Phase {
    double end_step;
    int start_lr, end_lr, start_momentum, end_momentum;  // 0 initial, 1 max, 2 min / 0 max, 1 base momentum
  };
  std::vector<Phase> phases_;
  int64_t total_steps_;
  int64_t linear_;  // anneal_strategy: 1 "linear", 0 "cos" (int64 for the state_dict)
  int64_t cycle_momentum_, use_beta1_;
  std::vector<double> initial_lrs_, max_lrs_, min_lrs_, max_momentums_, base_momentums_;
};

// Runs schedulers one after another, switching at the milestones (schedulers.size() - 1 of them); the
// scheduler switched to restarts from epoch 0 (closed form). The schedulers are shared with the caller.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones, int64_t last_epoch = -1);
  void step() override;

 protected:
  std::vector<double> get_lr() override;
  void visit(Fields& f) override;
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace lockstep::optim
