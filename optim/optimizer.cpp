// Optimizer's parameter groups, zero_grad and the flat state_dict (optimizer.h lists its keys).
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "optim/state_keys.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

void Optimizer::add_params(std::vector<Tensor> params) {
  const std::vector<Tensor> existing = this->params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    LOCKSTEP_CHECK(p.defined(), name_, ": parameter ", i, " of param group ", group_params_.size(), " is undefined");
    LOCKSTEP_CHECK(p.is_leaf() && p.requires_grad(), name_, ": parameter ", i, " ", p.shape(),
                   " is not a leaf tensor that requires grad");
    for (size_t j = 0; j < i; ++j)
      LOCKSTEP_CHECK(!p.is_same(params[j]), name_, ": parameter ", i, " appears twice (also at ", j, ")");
    for (size_t j = 0; j < existing.size(); ++j)
      LOCKSTEP_CHECK(!p.is_same(existing[j]), name_, ": parameter ", i, " ", p.shape(),
                     " is already in another param group (as parameter ", j, ")");
  }
  state_.resize(state_.size() + params.size());
  group_params_.push_back(std::move(params));
  initial_lr_.emplace_back();
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  LOCKSTEP_CHECK(group < group_params_.size(), name_, ": no param group ", group, " (it has ", group_params_.size(),
                 ")");
  return group_params_[group];
}

std::vector<Tensor> Optimizer::params() const {
  std::vector<Tensor> all;
  for (const auto& g : group_params_) all.insert(all.end(), g.begin(), g.end());
  return all;
}

size_t Optimizer::group_offset(size_t group) const {
  size_t off = 0;
  for (size_t g = 0; g < group; ++g) off += group_params_[g].size();
  return off;
}

std::optional<double> Optimizer::initial_lr(size_t group) const {
  params(group);  // checks the index
  return initial_lr_[group];
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  params(group);
  initial_lr_[group] = lr;
}

const std::map<std::string, Tensor>& Optimizer::state(size_t i) const {
  LOCKSTEP_CHECK(i < state_.size(), name_, ": no parameter ", i, " (it has ", state_.size(), ")");
  return state_[i];
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& group : group_params_) {
    for (auto& p : group) {
      if (!p.grad().defined()) continue;
      if (set_to_none) p.autograd_meta().grad = Tensor();
      else internal::fill_(p.autograd_meta().grad, 0.0);
    }
  }
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [key, t] : state_[i]) out.emplace_back(state_key(i, key), t);
  std::vector<size_t> sizes;
  for (const auto& group : group_params_) sizes.push_back(group.size());
  StateDict ids = group_params_entries(sizes);
  for (size_t g = 0; g < group_params_.size(); ++g) {
    save_options(g, group_key(g, ""), out);
    if (initial_lr_[g]) out.emplace_back(group_key(g, "initial_lr"), detail::option_tensor(*initial_lr_[g]));
    out.push_back(std::move(ids[g]));
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  std::map<std::string, Tensor> entries;
  for (const auto& [k, t] : sd) {
    LOCKSTEP_CHECK(t.defined(), name_, ".load_state_dict: entry '", k, "' is undefined");
    LOCKSTEP_CHECK(entries.emplace(k, t).second, name_, ".load_state_dict: entry '", k, "' appears twice");
  }
  // Groups: as many as this optimizer has, each of the same size.
  size_t groups = 0;
  while (entries.count(group_key(groups, "params"))) ++groups;
  LOCKSTEP_CHECK(groups == group_params_.size(), name_, ".load_state_dict: the state_dict has ", groups,
                 " param groups, this optimizer ", group_params_.size());
  for (size_t g = 0; g < groups; ++g) {
    const Tensor& ids = entries.at(group_key(g, "params"));
    LOCKSTEP_CHECK(ids.dim() == 1 && ids.numel() == static_cast<int64_t>(group_params_[g].size()), name_,
                   ".load_state_dict: param group ", g, " has ", ids.numel(), " parameters in the state_dict and ",
                   group_params_[g].size(), " in this optimizer");
  }
  // State: only known names, for existing parameters, shaped like them (step: one element).
  const std::vector<std::string> names = state_names();
  const std::vector<Tensor> all = params();
  std::vector<std::map<std::string, Tensor>> state(all.size());
  for (const auto& [key, t] : entries) {
    const StateKey parsed = parse_state_key(key, name_ + ".load_state_dict");
    if (parsed.kind == StateKey::Kind::kGroup) continue;
    const size_t i = parsed.index;
    const std::string& what = parsed.name;
    LOCKSTEP_CHECK(i < all.size(), name_, ".load_state_dict: key '", key, "' is for parameter ", i,
                   ", but this optimizer has ", all.size());
    LOCKSTEP_CHECK(std::find(names.begin(), names.end(), what) != names.end(), name_,
                   ".load_state_dict: unexpected state '", what, "' in key '", key, "'");
    const Tensor& p = all[i];
    if (is_scalar_state(what)) {
      LOCKSTEP_CHECK(t.numel() == 1, name_, ".load_state_dict: '", key, "' has shape ", t.shape(),
                     ", expected one element");
      state[i][what] = make_step_tensor(internal::to_dtype(t, kFloat64).item<double>());
    } else {
      LOCKSTEP_CHECK(t.shape() == p.shape(), name_, ".load_state_dict: '", key, "' has shape ", t.shape(),
                     ", parameter ", i, " has ", p.shape());
      state[i][what] = internal::to_device(internal::clone(internal::to_dtype(t, p.dtype())), p.device());
    }
  }
  // Options last, so that a failure above leaves the optimizer as it was (load_options checks).
  std::vector<std::optional<double>> initial(groups);
  for (size_t g = 0; g < groups; ++g) {
    const std::string key = group_key(g, "initial_lr");
    if (auto it = entries.find(key); it != entries.end()) {
      double v = 0;
      detail::read_option(it->second, v, key, name_);
      initial[g] = v;
    }
  }
  for (size_t g = 0; g < groups; ++g) load_options(g, entries, group_key(g, ""));
  state_ = std::move(state);
  initial_lr_ = std::move(initial);
}

Tensor make_step_tensor(double step) { return scalar_tensor(step, TensorOptions(kFloat32)); }
double step_of(const Tensor& step) { return step.item<float>(); }
void increment_step(Tensor& step) { step.data<float>()[0] += 1.0f; }

void check_lr(const std::string& who, double lr) {
  LOCKSTEP_CHECK(std::isfinite(lr) && lr >= 0, who, ": Invalid learning rate: ", lr);
}
void check_non_negative(const std::string& who, const char* what, double value) {
  LOCKSTEP_CHECK(value >= 0, who, ": Invalid ", what, " value: ", value);
}
void check_betas(const std::string& who, const std::array<double, 2>& betas) {
  for (int i = 0; i < 2; ++i)
    LOCKSTEP_CHECK(betas[i] >= 0 && betas[i] < 1, who, ": Invalid beta parameter at index ", i, ": ", betas[i]);
}

void lerp_(Tensor& m, const Tensor& x, double w) {
  const Tensor d = internal::sub(x, m);
  if (std::abs(w) < 0.5) {
    internal::add_(m, d, w);
  } else {
    internal::copy_(m, x);
    internal::add_(m, d, w - 1);
  }
}

namespace detail {

Tensor option_tensor(double v) { return scalar_tensor(v, TensorOptions(kFloat64)); }
Tensor option_tensor(bool v) { return scalar_tensor(v ? 1.0 : 0.0, TensorOptions(kBool)); }
Tensor option_tensor(const std::array<double, 2>& v) { return tensor({v[0], v[1]}, {2}); }

const Tensor& find_option(const std::map<std::string, Tensor>& entries, const std::string& key,
                          const std::string& who) {
  auto it = entries.find(key);
  LOCKSTEP_CHECK(it != entries.end(), who, ".load_state_dict: missing '", key, "'");
  return it->second;
}

void read_option(const Tensor& t, double& v, const std::string& key, const std::string& who) {
  LOCKSTEP_CHECK(t.numel() == 1 && t.dtype() != kBool, who, ".load_state_dict: '", key, "' should be one number, got ",
                 t.shape(), " ", t.dtype());
  v = internal::to_dtype(t, kFloat64).item<double>();
}

void read_option(const Tensor& t, bool& v, const std::string& key, const std::string& who) {
  LOCKSTEP_CHECK(t.numel() == 1, who, ".load_state_dict: '", key, "' should be one bool, got ", t.shape());
  v = internal::to_dtype(t, kFloat64).item<double>() != 0;
}

void read_option(const Tensor& t, std::array<double, 2>& v, const std::string& key, const std::string& who) {
  LOCKSTEP_CHECK(t.numel() == 2, who, ".load_state_dict: '", key, "' should hold two numbers, got ", t.shape());
  auto x = internal::to_dtype(t, kFloat64).to_vector<double>();
  v = {x[0], x[1]};
}

}  // namespace detail
}  // namespace lockstep::optim
