// LRScheduler (lr_scheduler.h): stepping, the checks on every computed lr, the flat state_dict, and
// SequentialLR, which drives other schedulers through those hooks. The schedules' formulas are in
// lr_schedules.cpp.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {
namespace {

// Writes the fields as tensors.
struct Saver : LRScheduler::Fields {
  StateDict& out;
  explicit Saver(StateDict& o) : out(o) {}
  void field(const std::string& k, int64_t& v) override { out.emplace_back(k, tensor({v}, {})); }
  void field(const std::string& k, double& v) override { out.emplace_back(k, scalar_tensor(v, TensorOptions(kFloat64))); }
  void field(const std::string& k, std::vector<int64_t>& v) override {
    out.emplace_back(k, tensor(v, {static_cast<int64_t>(v.size())}));
  }
  void field(const std::string& k, std::vector<double>& v) override {
    out.emplace_back(k, tensor(v, {static_cast<int64_t>(v.size())}));
  }
};

// Reads the fields from tensors (into copies first: the scheduler changes only when every key loaded).
struct Loader : LRScheduler::Fields {
  const std::map<std::string, Tensor>& in;
  const std::string& who;
  std::vector<std::string> seen;
  Loader(const std::map<std::string, Tensor>& i, const std::string& w) : in(i), who(w) {}
  const Tensor& get(const std::string& k) {
    auto it = in.find(k);
    LOCKSTEP_CHECK(it != in.end(), who, ".load_state_dict: missing '", k, "'");
    seen.push_back(k);
    return it->second;
  }
  std::vector<double> numbers(const std::string& k, bool scalar) {
    const Tensor& t = get(k);
    LOCKSTEP_CHECK(!scalar || t.numel() == 1, who, ".load_state_dict: '", k, "' should be one number, got shape ",
                   t.shape());
    LOCKSTEP_CHECK(t.dim() <= 1, who, ".load_state_dict: '", k, "' should be 1-D, got shape ", t.shape());
    return internal::to_dtype(t, kFloat64).to_vector<double>();
  }
  void field(const std::string& k, int64_t& v) override { v = static_cast<int64_t>(numbers(k, true)[0]); }
  void field(const std::string& k, double& v) override { v = numbers(k, true)[0]; }
  void field(const std::string& k, std::vector<int64_t>& v) override {
    auto x = numbers(k, false);
    v.assign(x.begin(), x.end());
  }
  void field(const std::string& k, std::vector<double>& v) override { v = numbers(k, false); }
};

// Visits another object's fields with "prefix" before each key.
struct Prefixed : LRScheduler::Fields {
  LRScheduler::Fields& inner;
  std::string prefix;
  Prefixed(LRScheduler::Fields& i, std::string p) : inner(i), prefix(std::move(p)) {}
  void field(const std::string& k, int64_t& v) override { inner.field(prefix + k, v); }
  void field(const std::string& k, double& v) override { inner.field(prefix + k, v); }
  void field(const std::string& k, std::vector<int64_t>& v) override { inner.field(prefix + k, v); }
  void field(const std::string& k, std::vector<double>& v) override { inner.field(prefix + k, v); }
};

}  // namespace

// --- LRScheduler ---

LRScheduler::LRScheduler(std::string name, Optimizer& optimizer, int64_t last_epoch)
    : optimizer_(&optimizer), name_(std::move(name)), last_epoch_(last_epoch) {
  LOCKSTEP_CHECK(last_epoch >= -1, name_, ": invalid last_epoch ", last_epoch, " (-1 starts fresh)");
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    if (last_epoch == -1) {
      if (!optimizer.initial_lr(g)) optimizer.set_initial_lr(g, optimizer.lr(g));
    } else {
      LOCKSTEP_CHECK(optimizer.initial_lr(g).has_value(), name_, ": param group ", g,
                     " has no initial_lr, needed to resume with last_epoch ", last_epoch,
                     " (load the optimizer's state_dict first)");
    }
    base_lrs_.push_back(*optimizer.initial_lr(g));
  }
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  is_initial_ = true;
  try {
    step();
  } catch (...) {
    is_initial_ = false;
    throw;
  }
  is_initial_ = false;
}

void LRScheduler::step() {
  ++step_count_;
  update_lr();
}

void LRScheduler::update_lr(int64_t epoch) {
  std::vector<double> values;
  if (epoch < 0) {
    ++last_epoch_;
    values = get_lr();
  } else {
    last_epoch_ = epoch;
    values = closed_form_lr();
    if (values.empty()) values = get_lr();
  }
  LOCKSTEP_CHECK(values.size() == optimizer_->num_param_groups(), name_, ": computed ", values.size(),
                 " lrs for ", optimizer_->num_param_groups(), " param groups");
  for (size_t g = 0; g < values.size(); ++g) {
    LOCKSTEP_CHECK(std::isfinite(values[g]) && values[g] >= 0, name_, ": computed an invalid learning rate ",
                   values[g], " for param group ", g, " at epoch ", last_epoch_);
    optimizer_->set_lr(g, values[g]);
  }
  last_lr_ = group_lrs();
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (size_t g = 0; g < optimizer_->num_param_groups(); ++g) lrs.push_back(optimizer_->lr(g));
  return lrs;
}

void LRScheduler::visit(Fields& f) {
  f.field("last_epoch", last_epoch_);
  f.field("_step_count", step_count_);
  f.field("base_lrs", base_lrs_);
  f.field("_last_lr", last_lr_);
}

StateDict LRScheduler::state_dict() const {
  StateDict out;
  Saver saver(out);
  const_cast<LRScheduler*>(this)->visit(saver);  // the saver only reads
  return out;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  std::map<std::string, Tensor> in;
  for (const auto& [k, t] : state) {
    LOCKSTEP_CHECK(t.defined(), name_, ".load_state_dict: entry '", k, "' is undefined");
    in[k] = t;
  }
  // Load into a copy of the fields first (the saved form), so that a bad state_dict changes nothing.
  StateDict before = state_dict();
  Loader loader(in, name_);
  try {
    visit(loader);
    for (const auto& [k, t] : in)
      LOCKSTEP_CHECK(std::find(loader.seen.begin(), loader.seen.end(), k) != loader.seen.end(), name_,
                     ".load_state_dict: unexpected key '", k, "'");
    const size_t groups = optimizer_->num_param_groups();
    LOCKSTEP_CHECK(last_lr_.size() == groups, name_, ".load_state_dict: the state_dict is for ", last_lr_.size(),
                   " param groups, the optimizer has ", groups);
    LOCKSTEP_CHECK(base_lrs_.size() == groups, name_,
                   ".load_state_dict: base_lrs has ", base_lrs_.size(), " entries for ", groups, " param groups");
  } catch (...) {
    std::map<std::string, Tensor> old(before.begin(), before.end());
    Loader restore(old, name_);
    visit(restore);
    throw;
  }
}

// --- SequentialLR ---

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones, int64_t last_epoch)
    : LRScheduler("SequentialLR", optimizer, last_epoch), schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  LOCKSTEP_CHECK(!schedulers_.empty(), "SequentialLR: expects at least one scheduler, got none");
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    LOCKSTEP_CHECK(schedulers_[k] != nullptr, "SequentialLR: scheduler ", k, " is null");
    LOCKSTEP_CHECK(&schedulers_[k]->optimizer() == &optimizer, "SequentialLR: expects all schedulers to belong to "
                   "the same optimizer, but scheduler ", k, " (", schedulers_[k]->name(), ") has another");
    LOCKSTEP_CHECK(dynamic_cast<SequentialLR*>(schedulers_[k].get()) == nullptr,
                   "SequentialLR: scheduler ", k, " is itself a SequentialLR, which cannot restart at a milestone");
  }
  LOCKSTEP_CHECK(milestones_.size() == schedulers_.size() - 1, "SequentialLR: expects one milestone fewer than "
                 "schedulers, got ", schedulers_.size(), " schedulers and ", milestones_.size(), " milestones");
  for (size_t k = 1; k < milestones_.size(); ++k)
    LOCKSTEP_CHECK(milestones_[k - 1] <= milestones_[k], "SequentialLR: milestones must be sorted, got ",
                   milestones_[k - 1], " before ", milestones_[k]);
  // PyTorch's constructor: back to the initial lrs, each scheduler one epoch back, and the first
  // scheduler's initial step again.
  last_epoch_ = last_epoch + 1;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) optimizer.set_lr(g, *optimizer.initial_lr(g));
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  const auto idx = std::upper_bound(milestones_.begin(), milestones_.end(), 0) - milestones_.begin();
  schedulers_[idx]->initial_step();
  last_lr_ = schedulers_[idx]->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  const auto idx = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) s.update_lr(0);
  else s.step();
  last_lr_ = s.get_last_lr();
}

std::vector<double> SequentialLR::get_lr() {
  LOCKSTEP_CHECK(false, "SequentialLR: has no get_lr of its own (it steps its schedulers)");
  return {};
}

void SequentialLR::visit(Fields& f) {
  f.field("last_epoch", last_epoch_);
  f.field("_milestones", milestones_);
  f.field("_last_lr", last_lr_);
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    Prefixed p(f, "_schedulers." + std::to_string(k) + ".");
    schedulers_[k]->visit(p);
  }
}

}  // namespace lockstep::optim
