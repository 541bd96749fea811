// LBFGS (lbfgs.h): torch.optim.LBFGS's step, its strong-Wolfe line search and cubic interpolation, with
// the same expressions in the same order, so float64 trajectories follow PyTorch's.
#include "optim/lbfgs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "autograd/grad_mode.h"
#include "optim/state_keys.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

void LBFGSOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  LOCKSTEP_CHECK(max_iter_ > 0, who, ": Invalid max_iter value: ", max_iter_, " (at least 1)");
  LOCKSTEP_CHECK(!max_eval_ || *max_eval_ > 0, who, ": Invalid max_eval value: ", max_eval_.value_or(0),
                 " (at least 1)");
  LOCKSTEP_CHECK(history_size_ > 0, who, ": Invalid history_size value: ", history_size_, " (at least 1)");
  check_non_negative(who, "tolerance_grad", tolerance_grad_);
  check_non_negative(who, "tolerance_change", tolerance_change_);
  LOCKSTEP_CHECK(!line_search_fn_ || *line_search_fn_ == "strong_wolfe", who,
                 ": only 'strong_wolfe' is supported as line_search_fn, got '", line_search_fn_.value_or(""), "'");
}

namespace {

// The state between steps, unpacked from (and packed back into) parameter 0's state map.
struct Memory {
  int64_t func_evals = 0, n_iter = 0;
  Tensor d, prev_flat_grad;              // [N]
  std::vector<Tensor> old_dirs, old_stps;  // y and s of each kept iteration, [N] each
  std::vector<double> ro;                // 1 / (y . s)
  double t = 0, H_diag = 1, prev_loss = 0;
};

double number(const Tensor& t) { return internal::to_dtype(t, kFloat64).item<double>(); }
double dot(const Tensor& a, const Tensor& b) { return number(internal::sum(internal::mul(a, b))); }
double abs_max(const Tensor& a) { return number(internal::max(internal::abs(a), 0)); }
Tensor f64(double v) { return scalar_tensor(v, TensorOptions(kFloat64)); }

// Python's max(a, b) and min(a, b): the first argument unless the second is strictly larger (smaller).
double pymax(double a, double b) { return b > a ? b : a; }
double pymin(double a, double b) { return b < a ? b : a; }

Memory unpack(const std::map<std::string, Tensor>& s) {
  Memory m;
  auto has = [&](const char* k) { return s.count(k) > 0; };
  if (has("func_evals")) m.func_evals = static_cast<int64_t>(number(s.at("func_evals")));
  if (has("n_iter")) m.n_iter = static_cast<int64_t>(number(s.at("n_iter")));
  if (!has("d")) return m;
  m.d = s.at("d");
  m.prev_flat_grad = s.at("prev_flat_grad");
  m.t = number(s.at("t"));
  m.H_diag = number(s.at("H_diag"));
  m.prev_loss = number(s.at("prev_loss"));
  const Tensor &dirs = s.at("old_dirs"), &stps = s.at("old_stps");
  m.ro = internal::to_dtype(s.at("ro"), kFloat64).to_vector<double>();
  for (int64_t i = 0; i < dirs.size(0); ++i) {
    m.old_dirs.push_back(internal::select(dirs, 0, i));
    m.old_stps.push_back(internal::select(stps, 0, i));
  }
  return m;
}

void pack(const Memory& m, std::map<std::string, Tensor>& s) {
  s["func_evals"] = tensor({m.func_evals}, {});
  s["n_iter"] = tensor({m.n_iter}, {});
  if (!m.d.defined()) return;
  const int64_t k = static_cast<int64_t>(m.ro.size()), n = m.d.numel();
  auto history = [&](const std::vector<Tensor>& rows) {
    return rows.empty() ? empty({0, n}, TensorOptions(m.d.dtype(), m.d.device())) : internal::stack(rows, 0);
  };
  s["d"] = m.d;
  s["t"] = f64(m.t);
  s["old_dirs"] = history(m.old_dirs);  // [k, N]
  s["old_stps"] = history(m.old_stps);
  s["ro"] = tensor(m.ro, {k});
  s["H_diag"] = f64(m.H_diag);
  s["prev_flat_grad"] = m.prev_flat_grad;
  s["prev_loss"] = f64(m.prev_loss);
}

// lbfgs's memory update with the new gradient, then the two-loop recursion: the new direction m.d.
void update_direction(Memory& m, const Tensor& grad, int64_t history_size) {
  Tensor y = internal::sub(grad, m.prev_flat_grad), s = internal::mul(m.d, m.t);
  const double ys = dot(y, s);
  if (ys > 1e-10) {
    if (static_cast<int64_t>(m.old_dirs.size()) == history_size) {
      m.old_dirs.erase(m.old_dirs.begin());
      m.old_stps.erase(m.old_stps.begin());
      m.ro.erase(m.ro.begin());
    }
    m.old_dirs.push_back(y);
    m.old_stps.push_back(s);
    m.ro.push_back(1.0 / ys);
    m.H_diag = ys / dot(y, y);
  }
  const size_t num_old = m.old_dirs.size();
  std::vector<double> al(num_old);
  Tensor q = internal::neg(grad);
  for (size_t j = num_old; j-- > 0;) {
    al[j] = dot(m.old_stps[j], q) * m.ro[j];
    internal::add_(q, m.old_dirs[j], -al[j]);
  }
  Tensor r = internal::mul(q, m.H_diag);
  for (size_t j = 0; j < num_old; ++j) {
    const double be_j = dot(m.old_dirs[j], r) * m.ro[j];
    internal::add_(r, m.old_stps[j], al[j] - be_j);
  }
  m.d = r;
}

// The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, clamped to bounds
// (default: [x1, x2] in order); their midpoint when the cubic has no minimum.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  double lo = x1 <= x2 ? x1 : x2, hi = x1 <= x2 ? x2 : x1;
  if (bounds) lo = bounds->first, hi = bounds->second;
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square < 0) return (lo + hi) / 2.0;
  const double d2 = std::sqrt(d2_square);
  const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                  : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return pymin(pymax(min_pos, lo), hi);
}

struct LineSearch {
  double f;
  Tensor g;
  double t;
  int64_t evals;
};

using Objective = std::function<std::pair<double, Tensor>(double t)>;

// A bracket of up to two step lengths with their losses, gradients and directional derivatives.
struct Bracket {
  double t[2] = {0, 0}, f[2] = {0, 0}, gtd[2] = {0, 0};
  Tensor g[2];
  int n = 0;
  void set(int i, double ti, double fi, const Tensor& gi, double gtdi) { t[i] = ti, f[i] = fi, g[i] = gi, gtd[i] = gtdi; }
};

// torch.optim.lbfgs._strong_wolfe: a step length t along d from loss f, gradient g and slope gtd.
LineSearch strong_wolfe(const Objective& obj, double t, const Tensor& d, double f, const Tensor& g, double gtd,
                        int64_t max_ls, double c1 = 1e-4, double c2 = 0.9, double tolerance_change = 1e-9) {
  const double d_norm = abs_max(d);
  auto [f_new, g_new] = obj(t);
  int64_t evals = 1, ls_iter = 0;
  double gtd_new = dot(g_new, d), t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  Bracket b;
  // Bracket an interval containing a point satisfying the Wolfe criteria.
  while (ls_iter < max_ls) {
    const bool armijo_fails = f_new > (f + c1 * t * gtd) || (ls_iter > 1 && f_new >= f_prev);
    if (!armijo_fails && std::abs(gtd_new) <= -c2 * gtd) {
      b.set(0, t, f_new, g_new, gtd_new), b.n = 1, done = true;
      break;
    }
    if (armijo_fails || gtd_new >= 0) {
      b.set(0, t_prev, f_prev, g_prev, gtd_prev), b.set(1, t, f_new, g_new, gtd_new), b.n = 2;
      break;
    }
    const double min_step = t + 0.01 * (t - t_prev), max_step = t * 10, tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, std::make_pair(min_step, max_step));
    t_prev = tmp, f_prev = f_new, g_prev = g_new, gtd_prev = gtd_new;
    std::tie(f_new, g_new) = obj(t);
    ++evals, ++ls_iter;
    gtd_new = dot(g_new, d);
  }
  if (ls_iter >= max_ls) b.set(0, 0, f, g, 0), b.set(1, t, f_new, g_new, 0), b.n = 2;
  // Zoom: refine the bracket until a point satisfies the criteria.
  bool insuf_progress = false;
  int low = b.f[0] <= b.f[b.n - 1] ? 0 : 1, high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::abs(b.t[1] - b.t[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(b.t[0], b.f[0], b.gtd[0], b.t[1], b.f[1], b.gtd[1]);
    // Too close to an end of the bracket (or twice in a row): move 0.1 of its length inside.
    const double bmax = pymax(b.t[0], b.t[1]), bmin = pymin(b.t[0], b.t[1]), eps = 0.1 * (bmax - bmin);
    if (pymin(bmax - t, t - bmin) < eps) {
      if (insuf_progress || t >= bmax || t <= bmin) {
        t = std::abs(t - bmax) < std::abs(t - bmin) ? bmax - eps : bmin + eps;
        insuf_progress = false;
      } else {
        insuf_progress = true;
      }
    } else {
      insuf_progress = false;
    }
    std::tie(f_new, g_new) = obj(t);
    ++evals, ++ls_iter;
    gtd_new = dot(g_new, d);
    if (f_new > (f + c1 * t * gtd) || f_new >= b.f[low]) {
      b.set(high, t, f_new, g_new, gtd_new);
      low = b.f[0] <= b.f[1] ? 0 : 1, high = 1 - low;
    } else {
      if (std::abs(gtd_new) <= -c2 * gtd) done = true;
      else if (gtd_new * (b.t[high] - b.t[low]) >= 0) b.set(high, b.t[low], b.f[low], b.g[low], b.gtd[low]);
      b.set(low, t, f_new, g_new, gtd_new);
    }
  }
  return {b.f[low], b.g[low], b.t[low], evals};
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions options) : Optimizer("LBFGS"), options_(std::move(options)) {
  LOCKSTEP_CHECK(!params.empty(), "LBFGS: got an empty parameter list");
  if (!options_.max_eval()) options_.max_eval(options_.max_iter() * 5 / 4);
  options_.check(name());
  add_params(std::move(params));
  const Tensor& first = this->params(0)[0];
  for (const Tensor& p : this->params(0)) {
    LOCKSTEP_CHECK(p.dtype() == first.dtype() && p.device() == first.device(), "LBFGS: every parameter must have ",
                   "one dtype and device (they are flattened into one vector), got ", p.dtype(), " on ", p.device(),
                   " and ", first.dtype(), " on ", first.device());
    numel_ += p.numel();
  }
}

void LBFGS::step() {
  LOCKSTEP_CHECK(false, "LBFGS: step() needs a closure that clears the gradients, computes the loss, calls "
                 "backward and returns the loss: step([&] { ...; return loss; })");
}

double LBFGS::lr(size_t group) const {
  params(group);  // checks the index
  return options_.lr();
}

void LBFGS::set_lr(size_t group, double lr) {
  params(group);
  LBFGSOptions o = options_;
  o.lr(lr);
  o.check(name());
  options_ = o;
}

double LBFGS::loss_of(const Tensor& loss) const {
  LOCKSTEP_CHECK(loss.defined() && loss.numel() == 1, "LBFGS: the closure must return the loss, one number; got ",
                 loss.defined() ? loss.shape() : Shape{});
  const double v = number(loss);
  return options_.maximize() ? -v : v;
}

Tensor LBFGS::flat_grad() const {
  std::vector<Tensor> views;
  for (const Tensor& p : params(0)) {
    const Tensor& g = p.grad();
    views.push_back(g.defined() ? internal::reshape(g, {p.numel()}) : zeros({p.numel()}, TensorOptions(p.dtype(), p.device())));
  }
  Tensor flat = views.size() == 1 ? internal::clone(views[0]) : internal::cat(views, 0);  // [N], a copy
  return options_.maximize() ? internal::neg(flat) : flat;
}

void LBFGS::add_grad(double step, const Tensor& update) {
  int64_t offset = 0;
  for (const Tensor& param : params(0)) {
    Tensor p = param;
    const int64_t n = p.numel();
    internal::add_(p, internal::view(internal::narrow(update, 0, offset, n), p.shape()), step);
    offset += n;
  }
}

std::pair<double, Tensor> LBFGS::directional_evaluate(const LossClosure& closure, const std::vector<Tensor>& x,
                                                      double t, const Tensor& d) {
  add_grad(t, d);
  const double loss = loss_of(closure());
  Tensor grad = flat_grad();
  for (size_t i = 0; i < x.size(); ++i) {
    Tensor p = params(0)[i];
    internal::copy_(p, x[i]);
  }
  return {loss, grad};
}

Tensor LBFGS::step(const LossClosure& closure) {
  LOCKSTEP_CHECK(static_cast<bool>(closure), "LBFGS: step needs a closure that computes the loss and its gradients");
  NoGradGuard no_grad;
  const LossClosure evaluate = [&] {
    EnableGradGuard grad_mode;  // the closure runs with gradients whatever the caller's mode
    return closure();
  };
  const LBFGSOptions& o = options_;
  const int64_t max_eval = *o.max_eval();
  Memory m = unpack(mutable_state(0));
  Tensor orig_loss = evaluate();
  double loss = loss_of(orig_loss);
  int64_t current_evals = 1;
  m.func_evals += 1;
  Tensor grad = flat_grad();
  bool opt_cond = abs_max(grad) <= o.tolerance_grad();
  for (int64_t n_iter = 1; !opt_cond && n_iter <= o.max_iter(); ++n_iter) {
    m.n_iter += 1;
    if (m.n_iter == 1) {
      Memory fresh;  // a first iteration forgets the history, keeping the counters
      fresh.func_evals = m.func_evals, fresh.n_iter = m.n_iter;
      m = std::move(fresh);
      m.d = internal::neg(grad);
    } else {
      update_direction(m, grad, o.history_size());
    }
    if (!m.prev_flat_grad.defined()) m.prev_flat_grad = internal::clone(grad);
    else internal::copy_(m.prev_flat_grad, grad);
    m.prev_loss = loss;
    // The first step ever is scaled to at most lr / |g|_1.
    m.t = m.n_iter == 1 ? pymin(1.0, 1.0 / number(internal::sum(internal::abs(grad)))) * o.lr() : o.lr();
    const double gtd = dot(grad, m.d);
    if (gtd > -o.tolerance_change()) break;  // the directional derivative is below tolerance
    int64_t ls_func_evals = 0;
    if (o.line_search_fn()) {
      std::vector<Tensor> x_init;
      for (const Tensor& p : params(0)) x_init.push_back(internal::clone(p));
      auto obj = [&](double t) { return directional_evaluate(evaluate, x_init, t, m.d); };
      LineSearch ls = strong_wolfe(obj, m.t, m.d, loss, grad, gtd, max_eval - current_evals);
      loss = ls.f, grad = ls.g, m.t = ls.t, ls_func_evals = ls.evals;
      add_grad(m.t, m.d);
      opt_cond = abs_max(grad) <= o.tolerance_grad();
    } else {
      add_grad(m.t, m.d);
      if (n_iter != o.max_iter()) {  // the last iteration's loss is not needed (PyTorch skips it too)
        loss = loss_of(evaluate());
        grad = flat_grad();
        opt_cond = abs_max(grad) <= o.tolerance_grad();
        ls_func_evals = 1;
      }
    }
    current_evals += ls_func_evals;
    m.func_evals += ls_func_evals;
    if (n_iter == o.max_iter() || current_evals >= max_eval) break;
    // Lack of progress (opt_cond ends the loop above).
    if (abs_max(m.d) * std::abs(m.t) <= o.tolerance_change() || std::abs(loss - m.prev_loss) < o.tolerance_change())
      break;
  }
  pack(m, mutable_state(0));
  return orig_loss;
}

void LBFGS::load_state_dict(const StateDict& sd) {
  const std::string who = name() + ".load_state_dict";
  const Tensor& first = params(0)[0];
  StateDict groups;
  std::map<std::string, Tensor> state;
  const std::vector<std::string> names = state_names();
  for (const auto& [key, t] : sd) {
    if (is_group_key(key)) {
      groups.emplace_back(key, t);
      continue;
    }
    const StateKey k = parse_state_key(key, who);
    LOCKSTEP_CHECK(k.index == 0, who, ": LBFGS keeps its state on parameter 0, got '", key, "'");
    LOCKSTEP_CHECK(std::find(names.begin(), names.end(), k.name) != names.end(), who, ": unexpected state '", k.name,
                   "' in key '", key, "'");
    LOCKSTEP_CHECK(t.defined(), who, ": entry '", key, "' is undefined");
    state[k.name] = t;
  }
  // Shapes: flat vectors of the parameters' total size, a history of k of them, numbers.
  auto expect = [&](const std::string& k, const Shape& shape) {
    LOCKSTEP_CHECK(state.count(k), who, ": missing 'state.0.", k, "' (the state has 'd')");
    LOCKSTEP_CHECK(state.at(k).shape() == shape, who, ": 'state.0.", k, "' has shape ", state.at(k).shape(),
                   ", expected ", shape, " (the parameters have ", numel_, " elements)");
  };
  for (const char* k : {"func_evals", "n_iter", "t", "H_diag", "prev_loss"})
    if (state.count(k))
      LOCKSTEP_CHECK(state.at(k).numel() == 1, who, ": 'state.0.", k, "' should be one number, got shape ",
                     state.at(k).shape());
  std::map<std::string, Tensor> loaded;
  for (const char* k : {"func_evals", "n_iter"})
    if (state.count(k)) loaded[k] = tensor({static_cast<int64_t>(number(state.at(k)))}, {});
  if (state.count("d")) {
    const int64_t hist = state.count("ro") ? state.at("ro").numel() : 0;
    for (const char* k : {"d", "prev_flat_grad"}) expect(k, {numel_});
    for (const char* k : {"old_dirs", "old_stps"}) expect(k, {hist, numel_});
    expect("ro", {hist});
    for (const char* k : {"t", "H_diag", "prev_loss"}) expect(k, {});
    for (const char* k : {"d", "prev_flat_grad", "old_dirs", "old_stps"})
      loaded[k] = internal::to_device(internal::clone(internal::to_dtype(state.at(k), first.dtype())), first.device());
    loaded["ro"] = internal::clone(internal::to_dtype(state.at("ro"), kFloat64));
    for (const char* k : {"t", "H_diag", "prev_loss"}) loaded[k] = f64(number(state.at(k)));
  }
  Optimizer::load_state_dict(groups);  // checks the groups and loads the options
  mutable_state(0) = std::move(loaded);
}

std::vector<std::string> LBFGS::state_names() const {
  return {"func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss"};
}

void LBFGS::save_options(size_t, const std::string& prefix, StateDict& out) const {
  const LBFGSOptions& o = options_;
  auto i64 = [](int64_t v) { return tensor({v}, {}); };
  out.emplace_back(prefix + "lr", detail::option_tensor(o.lr()));
  out.emplace_back(prefix + "max_iter", i64(o.max_iter()));
  out.emplace_back(prefix + "max_eval", i64(*o.max_eval()));
  out.emplace_back(prefix + "tolerance_grad", detail::option_tensor(o.tolerance_grad()));
  out.emplace_back(prefix + "tolerance_change", detail::option_tensor(o.tolerance_change()));
  out.emplace_back(prefix + "history_size", i64(o.history_size()));
  out.emplace_back(prefix + "maximize", detail::option_tensor(o.maximize()));
}

void LBFGS::load_options(size_t group, const std::map<std::string, Tensor>& entries, const std::string& prefix) {
  LBFGSOptions o = options_;
  auto read = [&](const char* key) {
    double v = 0;
    detail::read_option(detail::find_option(entries, prefix + key, name()), v, prefix + key, name());
    return v;
  };
  bool maximize = false;
  detail::read_option(detail::find_option(entries, prefix + "maximize", name()), maximize, prefix + "maximize", name());
  o.lr(read("lr")).max_iter(static_cast<int64_t>(read("max_iter"))).max_eval(static_cast<int64_t>(read("max_eval")));
  o.tolerance_grad(read("tolerance_grad")).tolerance_change(read("tolerance_change"));
  o.history_size(static_cast<int64_t>(read("history_size"))).maximize(maximize);
  o.check(name() + " (loaded param group " + std::to_string(group) + ")");
  options_ = o;
}

}  // namespace lockstep::optim
