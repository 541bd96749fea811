// LBFGS: torch.optim.LBFGS's algorithm step for step (limited-memory BFGS over all parameters
// flattened into one vector, optionally with the strong-Wolfe line search ported from torch/optim's
// lswolfe.lua). step(closure) calls the closure (which clears the gradients, computes the loss, calls
// backward and returns the loss) up to max_eval times, for at most max_iter iterations:
//   optim::LBFGS opt(model->parameters(), optim::LBFGSOptions(1).line_search_fn("strong_wolfe"));
//   opt.step([&] { opt.zero_grad(); Tensor loss = criterion(model(x), y); loss.backward(); return loss; });
// The scalars of the algorithm (step length, curvature, directional derivatives) are kept as double,
// as PyTorch's are for float64 parameters. One param group only, as PyTorch's.
//
// State, as PyTorch keeps it on the first parameter (state.0.<name> in the state_dict): func_evals and
// n_iter (int64 []), d and prev_flat_grad (the flattened direction and gradient, [N] in the parameters'
// dtype), old_dirs and old_stps (the history, [k, N]), ro ([k], float64), t, H_diag and prev_loss
// (float64 []). The group's options are saved except line_search_fn (a string; the optimizer keeps its
// own).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/options.h"
#include "optim/optimizer.h"

namespace lockstep::optim {

struct LBFGSOptions {
  LBFGSOptions(double lr = 1) : lr_(lr) {}  // NOLINT: LBFGSOptions(0.5)
  LOCKSTEP_ARG(double, lr, 1);
  LOCKSTEP_ARG(int64_t, max_iter, 20);
  // Function evaluations per step; unset: max_iter * 5 / 4.
  LOCKSTEP_ARG(std::optional<int64_t>, max_eval, std::nullopt);
  LOCKSTEP_ARG(double, tolerance_grad, 1e-7);
  LOCKSTEP_ARG(double, tolerance_change, 1e-9);
  LOCKSTEP_ARG(int64_t, history_size, 100);
  // Unset: a fixed step of lr; "strong_wolfe": the line search.
  LOCKSTEP_ARG(std::optional<std::string>, line_search_fn, std::nullopt);
  LOCKSTEP_ARG(bool, maximize, false);

 public:
  // Throws, naming `who`, for options torch.optim.LBFGS rejects.
  void check(const std::string& who) const;
};

class LBFGS : public Optimizer {
 public:
  using LossClosure = std::function<Tensor()>;

  LBFGS(std::vector<Tensor> params, LBFGSOptions options = {});
  // One optimisation step (up to max_iter iterations); returns the closure's first loss.
  Tensor step(const LossClosure& closure);
  // Throws: LBFGS needs a closure.
  void step() override;

  LBFGSOptions& options() { return options_; }
  const LBFGSOptions& options() const { return options_; }
  double lr(size_t group) const override;
  void set_lr(size_t group, double lr) override;

  // Options and state as state_dict() saves them; the state's shapes are checked against the
  // parameters' total size.
  void load_state_dict(const StateDict& state) override;

 protected:
  std::vector<std::string> state_names() const override;
  void save_options(size_t group, const std::string& prefix, StateDict& out) const override;
  void load_options(size_t group, const std::map<std::string, Tensor>& entries, const std::string& prefix) override;

 private:
  // The gradients of every parameter flattened into one [N] tensor (zeros for a missing gradient),
  // negated with maximize.
  Tensor flat_grad() const;
  // Every parameter += step * its slice of update [N].
  void add_grad(double step, const Tensor& update);
  // The loss and flat gradient at x + t * d; the parameters are x again afterwards.
  std::pair<double, Tensor> directional_evaluate(const LossClosure& closure, const std::vector<Tensor>& x, double t,
                                                 const Tensor& d);
  double loss_of(const Tensor& loss) const;

  LBFGSOptions options_;
  int64_t numel_ = 0;
};

}  // namespace lockstep::optim
