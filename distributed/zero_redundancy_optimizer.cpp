// ZeroRedundancyOptimizer: the partition, the local step and broadcasts, and the consolidated state.
#include "distributed/zero_redundancy_optimizer.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "autograd/grad_mode.h"
#include "distributed/init.h"
#include "optim/state_keys.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::dist {

std::vector<int> partition_parameters(const std::vector<std::vector<Tensor>>& param_groups, int world_size) {
  LOCKSTEP_CHECK(world_size >= 1, "partition_parameters: world_size must be >= 1, got ", world_size);
  std::vector<int64_t> load(world_size, 0);
  std::vector<int> owner;
  for (const auto& params : param_groups) {
    std::vector<size_t> order(params.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
    const size_t first = owner.size();
    owner.resize(first + params.size());
    for (size_t i : order) {
      const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      owner[first + i] = r;
      load[r] += params[i].numel();
    }
  }
  return owner;
}

std::vector<int> partition_parameters(const std::vector<Tensor>& params, int world_size) {
  return partition_parameters(std::vector<std::vector<Tensor>>{params}, world_size);
}

// The partition and each parameter's local index; the local optimizer is built by the public constructors.
ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<std::vector<Tensor>> param_groups,
                                                 std::shared_ptr<ProcessGroup> process_group) {
  pg_ = process_group ? std::move(process_group) : (is_initialized() ? default_pg() : nullptr);
  LOCKSTEP_CHECK(pg_, "ZeroRedundancyOptimizer: no process group; call init_process_group first");
  for (auto& g : param_groups) {
    group_size_.push_back(g.size());
    params_.insert(params_.end(), g.begin(), g.end());
  }
  LOCKSTEP_CHECK(!params_.empty(), "ZeroRedundancyOptimizer: got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i)
    LOCKSTEP_CHECK(params_[i].defined() && params_[i].is_contiguous(), "ZeroRedundancyOptimizer: parameter ", i,
                   " is undefined or not contiguous");
  owner_ = partition_parameters(param_groups, pg_->size());
  local_index_.resize(params_.size());
  std::vector<size_t> count(pg_->size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) local_index_[i] = count[owner_[i]]++;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, Factory make_optimizer,
                                                 std::shared_ptr<ProcessGroup> process_group)
    : ZeroRedundancyOptimizer(std::vector<std::vector<Tensor>>{std::move(params)}, std::move(process_group)) {
  LOCKSTEP_CHECK(make_optimizer, "ZeroRedundancyOptimizer: the optimizer factory is empty");
  std::vector<Tensor> mine;
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == pg_->rank()) mine.push_back(params_[i]);
  if (mine.empty()) return;
  const size_t n = mine.size();
  local_ = make_optimizer(std::move(mine));
  LOCKSTEP_CHECK(local_, "ZeroRedundancyOptimizer: the optimizer factory returned null");
  LOCKSTEP_CHECK(local_->params().size() == n, "ZeroRedundancyOptimizer: the factory's optimizer holds ",
                 local_->params().size(), " parameters; it must hold exactly the ones it is given");
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<std::vector<Tensor>> param_groups,
                                                 GroupsFactory make_optimizer,
                                                 std::shared_ptr<ProcessGroup> process_group)
    : ZeroRedundancyOptimizer(std::move(param_groups), std::move(process_group)) {
  LOCKSTEP_CHECK(make_optimizer, "ZeroRedundancyOptimizer: the optimizer factory is empty");
  std::vector<std::vector<Tensor>> shares(group_size_.size());
  bool any = false;
  for (size_t g = 0, i = 0; g < group_size_.size(); ++g)
    for (size_t k = 0; k < group_size_[g]; ++k, ++i)
      if (owner_[i] == pg_->rank()) shares[g].push_back(params_[i]), any = true;
  if (!any) return;
  local_ = make_optimizer(std::move(shares));
  LOCKSTEP_CHECK(local_, "ZeroRedundancyOptimizer: the optimizer factory returned null");
  check_groups("ZeroRedundancyOptimizer");
}

void ZeroRedundancyOptimizer::step() {
  consolidated_.reset();
  if (local_) local_->step();
  if (pg_->size() == 1) return;
  // Every parameter from its owner, all queued before the first wait: the backend runs them in order
  // while this thread waits (each wait bounded by the group's timeout).
  NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].detach();
    works.push_back(pg_->broadcast(p, owner_[i]));
  }
  for (auto& w : works) w->wait();
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  for (auto& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) p.autograd_meta().grad = Tensor();
    else internal::fill_(p.autograd_meta().grad, 0.0);
  }
}

double ZeroRedundancyOptimizer::lr() const {
  LOCKSTEP_CHECK(local_, "ZeroRedundancyOptimizer::lr: rank ", pg_->rank(), " owns no parameter");
  return local_->lr(0);
}

void ZeroRedundancyOptimizer::set_lr(double lr) {
  if (local_) local_->set_lr(0, lr);
}

namespace {

// Sends rank `root`'s named tensors to every rank: "name dtype d0,d1,..." lines as one uint8 tensor
// (its length first), then each tensor. Other ranks pass an empty list and get root's.
optim::StateDict broadcast_named(ProcessGroup& pg, const optim::StateDict& mine, int root) {
  const bool sender = pg.rank() == root;
  std::string header;
  if (sender) {
    std::ostringstream os;
    for (const auto& [k, t] : mine) {
      os << k << ' ' << static_cast<int>(t.dtype()) << ' ';
      for (int64_t s : t.shape()) os << s << ',';
      os << '\n';
    }
    header = os.str();
  }
  Tensor len = full({1}, static_cast<double>(header.size()), TensorOptions(kInt64));
  pg.broadcast(len, root, false);
  Tensor bytes = empty({len.item<int64_t>()}, TensorOptions(kUInt8));
  if (sender) std::copy(header.begin(), header.end(), bytes.data<uint8_t>());
  pg.broadcast(bytes, root, false);
  header.assign(reinterpret_cast<const char*>(bytes.data<uint8_t>()), bytes.numel());

  optim::StateDict out;
  std::istringstream is(header);
  std::string line;
  size_t n = 0;
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    std::string key, dims;
    int dtype = 0;
    ls >> key >> dtype >> dims;
    Shape shape;
    std::istringstream ds(dims);
    for (std::string d; std::getline(ds, d, ',');) shape.push_back(std::stoll(d));
    Tensor t = sender ? internal::contiguous(internal::to_device(mine[n].second, Device::cpu()))
                      : empty(shape, TensorOptions(static_cast<Dtype>(dtype)));
    if (sender) t = internal::clone(t);
    pg.broadcast(t, root, false);
    out.emplace_back(key, t);
    ++n;
  }
  return out;
}

}  // namespace

void ZeroRedundancyOptimizer::check_groups(const char* op) const {
  if (!local_) return;
  const size_t groups = group_size_.size();
  LOCKSTEP_CHECK(local_->num_param_groups() == groups, "ZeroRedundancyOptimizer::", op, ": the local ",
                 local_->name(), " has ", local_->num_param_groups(), " param groups, this ZeroRedundancyOptimizer ",
                 groups, "; state dicts need one local group per param group (build it over the groups: the "
                 "param-groups constructor)");
  for (size_t g = 0, i = 0; g < groups; ++g) {
    const auto& ps = local_->params(g);
    size_t j = 0;
    for (size_t k = 0; k < group_size_[g]; ++k, ++i) {
      if (owner_[i] != pg_->rank()) continue;
      LOCKSTEP_CHECK(j < ps.size() && ps[j].is_same(params_[i]), "ZeroRedundancyOptimizer::", op, ": the local ",
                     local_->name(), "'s param group ", g, " does not hold this rank's share of the given group ", g,
                     " in the given order");
      ++j;
    }
    LOCKSTEP_CHECK(j == ps.size(), "ZeroRedundancyOptimizer::", op, ": the local ", local_->name(), "'s param group ",
                   g, " holds ", ps.size(), " parameters; this rank's share of the group is ", j);
  }
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  LOCKSTEP_CHECK(to >= 0 && to < pg_->size(), "ZeroRedundancyOptimizer::consolidate_state_dict: to = ", to,
                 " is not a rank of a group of ", pg_->size());
  check_groups("consolidate_state_dict");
  NoGradGuard no_grad;
  // Global index of each rank's local parameter j.
  std::vector<std::vector<size_t>> global(pg_->size());
  for (size_t i = 0; i < params_.size(); ++i) global[owner_[i]].push_back(i);

  optim::StateDict options;  // param_groups.<g>.*, but params: every rank's options are the same
  std::map<size_t, optim::StateDict> per_param;
  for (int r = 0; r < pg_->size(); ++r) {
    if (global[r].empty()) continue;
    optim::StateDict mine;
    if (r == pg_->rank())  // a group's local indices are rewritten below (and an empty share has none to send)
      for (auto& [k, t] : local_->state_dict())
        if (!(optim::is_group_key(k) && k.ends_with(".params"))) mine.emplace_back(k, t);
    optim::StateDict local = broadcast_named(*pg_, mine, r);
    if (pg_->rank() != to) continue;
    for (auto& [k, t] : local) {
      const optim::StateKey key = optim::parse_state_key(k, "ZeroRedundancyOptimizer::consolidate_state_dict");
      if (key.kind == optim::StateKey::Kind::kState) per_param[global[r][key.index]].emplace_back(key.name, t);
      else if (r == owner_[0]) options.emplace_back(k, t);
    }
  }
  if (pg_->rank() != to) {
    consolidated_.reset();
    return;
  }
  optim::StateDict out;
  for (auto& [i, entries] : per_param)
    for (auto& [name, t] : entries) out.emplace_back(optim::state_key(i, name), t);
  optim::StateDict ids = optim::group_params_entries(group_size_);
  for (size_t g = 0; g < group_size_.size(); ++g) {
    const std::string prefix = optim::group_key(g, "");
    for (auto& [k, t] : options)
      if (k.starts_with(prefix)) out.emplace_back(k, t);
    out.push_back(std::move(ids[g]));
  }
  consolidated_ = std::move(out);
}

optim::StateDict ZeroRedundancyOptimizer::state_dict() const {
  LOCKSTEP_CHECK(consolidated_.has_value(), "ZeroRedundancyOptimizer::state_dict: rank ", pg_->rank(),
                 " holds no consolidated state; call consolidate_state_dict(to) on every rank first, and "
                 "state_dict() on rank `to` (the state is not kept across step())");
  return *consolidated_;
}

void ZeroRedundancyOptimizer::load_state_dict(const optim::StateDict& state) {
  check_groups("load_state_dict");
  const size_t groups = group_size_.size();
  std::vector<bool> found(groups, false);
  optim::StateDict local;
  for (const auto& [k, t] : state) {
    const optim::StateKey key = optim::parse_state_key(k, "ZeroRedundancyOptimizer::load_state_dict");
    const size_t i = key.index, g = key.index;
    if (key.kind == optim::StateKey::Kind::kState) {
      LOCKSTEP_CHECK(i < params_.size(), "ZeroRedundancyOptimizer::load_state_dict: key '", k, "' is for parameter ",
                     i, ", but this optimizer has ", params_.size());
      if (owner_[i] == pg_->rank()) local.emplace_back(optim::state_key(local_index_[i], key.name), t);
      continue;
    }
    LOCKSTEP_CHECK(g < groups, "ZeroRedundancyOptimizer::load_state_dict: unexpected key '", k, "' (this optimizer has ",
                   groups, " param group(s))");
    if (key.name == "params") {
      LOCKSTEP_CHECK(t.numel() == static_cast<int64_t>(group_size_[g]), "ZeroRedundancyOptimizer::load_state_dict: ",
                     "param group ", g, " has ", t.numel(), " parameters in the state_dict, ", group_size_[g],
                     " in this optimizer");
      found[g] = true;
    } else {
      local.emplace_back(k, t);
    }
  }
  for (size_t g = 0; g < groups; ++g)
    LOCKSTEP_CHECK(found[g], "ZeroRedundancyOptimizer::load_state_dict: no param_groups.", g, ".params entry (this ",
                   "optimizer has ", groups, " param group(s))");
  if (!local_) return;
  std::vector<size_t> mine;
  for (size_t g = 0; g < groups; ++g) mine.push_back(local_->params(g).size());
  for (auto& entry : optim::group_params_entries(mine)) local.push_back(std::move(entry));
  local_->load_state_dict(local);
}

}  // namespace lockstep::dist
