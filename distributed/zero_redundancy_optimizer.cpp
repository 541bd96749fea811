// ZeroRedundancyOptimizer: the partition, the local step and broadcasts, and the consolidated state.
#include "distributed/zero_redundancy_optimizer.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "autograd/grad_mode.h"
#include "distributed/init.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::dist {

std::vector<int> partition_parameters(const std::vector<Tensor>& params, int world_size) {
  LOCKSTEP_CHECK(world_size >= 1, "partition_parameters: world_size must be >= 1, got ", world_size);
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> load(world_size, 0);
  std::vector<int> owner(params.size());
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[r] += params[i].numel();
  }
  return owner;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, Factory make_optimizer,
                                                 std::shared_ptr<ProcessGroup> process_group)
    : params_(std::move(params)) {
  pg_ = process_group ? std::move(process_group) : (is_initialized() ? default_pg() : nullptr);
  LOCKSTEP_CHECK(pg_, "ZeroRedundancyOptimizer: no process group; call init_process_group first");
  LOCKSTEP_CHECK(!params_.empty(), "ZeroRedundancyOptimizer: got an empty parameter list");
  LOCKSTEP_CHECK(make_optimizer, "ZeroRedundancyOptimizer: the optimizer factory is empty");
  for (size_t i = 0; i < params_.size(); ++i)
    LOCKSTEP_CHECK(params_[i].defined() && params_[i].is_contiguous(), "ZeroRedundancyOptimizer: parameter ", i,
                   " is undefined or not contiguous");
  owner_ = partition_parameters(params_, pg_->size());
  std::vector<Tensor> mine;
  local_index_.resize(params_.size());
  std::vector<size_t> count(pg_->size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    local_index_[i] = count[owner_[i]]++;
    if (owner_[i] == pg_->rank()) mine.push_back(params_[i]);
  }
  if (!mine.empty()) {
    local_ = make_optimizer(std::move(mine));
    LOCKSTEP_CHECK(local_, "ZeroRedundancyOptimizer: the optimizer factory returned null");
    auto ps = local_->params();
    LOCKSTEP_CHECK(ps.size() == static_cast<size_t>(std::count(owner_.begin(), owner_.end(), pg_->rank())),
                   "ZeroRedundancyOptimizer: the factory's optimizer holds ", ps.size(),
                   " parameters; it must hold exactly the ones it is given");
  }
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

// "state.<i>.<name>" -> i and name; false for other keys.
bool parse_state_key(const std::string& key, size_t& i, std::string& name) {
  if (key.rfind("state.", 0) != 0) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos) return false;
  i = std::stoul(key.substr(6, dot - 6));
  name = key.substr(dot + 1);
  return true;
}

}  // namespace

void ZeroRedundancyOptimizer::check_one_group(const char* op) const {
  LOCKSTEP_CHECK(!local_ || local_->num_param_groups() == 1, "ZeroRedundancyOptimizer::", op, ": the local ",
                 local_->name(), " has ", local_->num_param_groups(), " param groups; state dicts need one group");
  if (!local_) return;
  auto ps = local_->params();
  size_t j = 0;
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == pg_->rank())
      LOCKSTEP_CHECK(ps[j++].is_same(params_[i]), "ZeroRedundancyOptimizer::", op, ": the local ", local_->name(),
                     " holds its parameters in another order than given; state dicts need the given order");
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  LOCKSTEP_CHECK(to >= 0 && to < pg_->size(), "ZeroRedundancyOptimizer::consolidate_state_dict: to = ", to,
                 " is not a rank of a group of ", pg_->size());
  check_one_group("consolidate_state_dict");
  NoGradGuard no_grad;
  // Global index of each rank's local parameter j.
  std::vector<std::vector<size_t>> global(pg_->size());
  for (size_t i = 0; i < params_.size(); ++i) global[owner_[i]].push_back(i);

  optim::StateDict groups;  // param_groups.0.*
  std::map<size_t, optim::StateDict> per_param;
  for (int r = 0; r < pg_->size(); ++r) {
    if (global[r].empty()) continue;
    optim::StateDict local = broadcast_named(*pg_, r == pg_->rank() ? local_->state_dict() : optim::StateDict{}, r);
    if (pg_->rank() != to) continue;
    for (auto& [k, t] : local) {
      size_t j = 0;
      std::string name;
      if (parse_state_key(k, j, name)) {
        per_param[global[r][j]].emplace_back(name, t);
      } else if (r == owner_[0]) {  // every rank's options are the same: take one rank's
        groups.emplace_back(k, t);
      }
    }
  }
  if (pg_->rank() != to) {
    consolidated_.reset();
    return;
  }
  optim::StateDict out;
  for (auto& [i, entries] : per_param)
    for (auto& [name, t] : entries) out.emplace_back("state." + std::to_string(i) + "." + name, t);
  for (auto& [k, t] : groups) {
    if (k == "param_groups.0.params") out.emplace_back(k, arange(static_cast<int64_t>(params_.size())));
    else out.emplace_back(k, t);
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
  check_one_group("load_state_dict");
  const int64_t n = static_cast<int64_t>(params_.size());
  bool found_params = false;
  optim::StateDict local;
  for (const auto& [k, t] : state) {
    size_t i = 0;
    std::string name;
    if (parse_state_key(k, i, name)) {
      LOCKSTEP_CHECK(i < params_.size(), "ZeroRedundancyOptimizer::load_state_dict: key '", k, "' is for parameter ",
                     i, ", but this optimizer has ", n);
      if (owner_[i] == pg_->rank()) local.emplace_back("state." + std::to_string(local_index_[i]) + "." + name, t);
    } else if (k == "param_groups.0.params") {
      LOCKSTEP_CHECK(t.numel() == n, "ZeroRedundancyOptimizer::load_state_dict: the state_dict has ", t.numel(),
                     " parameters, this optimizer ", n);
      found_params = true;
    } else {
      LOCKSTEP_CHECK(k.rfind("param_groups.0.", 0) == 0, "ZeroRedundancyOptimizer::load_state_dict: unexpected key '",
                     k, "' (one param group is supported)");
      local.emplace_back(k, t);
    }
  }
  LOCKSTEP_CHECK(found_params, "ZeroRedundancyOptimizer::load_state_dict: no param_groups.0.params entry");
  if (!local_) return;
  const int64_t mine = static_cast<int64_t>(local_->params(0).size());
  local.emplace_back("param_groups.0.params", arange(mine));
  local_->load_state_dict(local);
}

}  // namespace lockstep::dist
