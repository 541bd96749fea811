// Full and sharded state dicts of fully_shard-ed models (state_dict.h).
#include "distributed/fsdp/state_dict.h"

#include <array>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "distributed/fsdp/unit.h"
#include "optim/state_keys.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/safetensors.h"

namespace lockstep::dist {

namespace in = lockstep::internal;

namespace {

struct Sharded {
  fsdp::Unit* unit;
  const fsdp::FlatEntry* entry;
};

// Each sharded parameter's unit and entry, by the handle's impl.
std::unordered_map<TensorImpl*, Sharded> sharded_params(nn::Module& module, ProcessGroup** pg) {
  std::unordered_map<TensorImpl*, Sharded> out;
  for (auto& u : fsdp::units_in(module)) {
    if (pg) *pg = &u->process_group();
    for (auto& e : u->entries()) out[e.param.impl()] = Sharded{u.get(), &e};
  }
  return out;
}

ProcessGroup& group_of(nn::Module& module, const char* op) {
  ProcessGroup* pg = nullptr;
  sharded_params(module, &pg);
  LOCKSTEP_CHECK(pg, op, ": ", module.name(), " holds no fully_shard-ed unit");
  return *pg;
}

}  // namespace

nn::NamedTensors full_state_dict(nn::Module& module, bool rank0_only) {
  NoGradGuard no_grad;
  ProcessGroup& pg = group_of(module, "full_state_dict");
  std::unordered_map<TensorImpl*, Tensor> full;
  for (auto& u : fsdp::units_in(module)) {
    if (u->entries().empty()) continue;
    Tensor flat = empty({u->shard_numel() * pg.size()}, TensorOptions(u->dtype(), u->shard().device()));
    pg.all_gather_into_tensor(flat, u->shard(), false);
    for (auto& e : u->entries()) full[e.param.impl()] = in::clone(in::view_range(flat, e.offset, e.shape));
  }
  if (rank0_only && pg.rank() != 0) return {};
  nn::NamedTensors out;
  for (auto& [name, t] : module.state_dict()) {
    auto it = full.find(t.impl());
    out.emplace_back(name, it != full.end() ? it->second : in::clone(t));
  }
  return out;
}

void load_full_state_dict(nn::Module& module, const nn::NamedTensors& state) {
  NoGradGuard no_grad;
  auto sharded = sharded_params(module, nullptr);
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) given[n] = &t;
  std::vector<std::string> missing;
  for (auto& [name, t] : module.state_dict()) {
    auto g = given.find(name);
    if (g == given.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = *g->second;
    auto s = sharded.find(t.impl());
    const Shape shape = s != sharded.end() ? s->second.entry->shape : t.shape();
    LOCKSTEP_CHECK(src.defined() && src.shape() == shape, "load_full_state_dict: size mismatch for '", name,
                   "': checkpoint has ", src.defined() ? src.shape() : Shape{}, ", model has ", shape);
    if (s != sharded.end()) {
      auto* u = s->second.unit;
      auto [a, b] = u->local_range(*s->second.entry);
      Tensor dst = u->local_view(u->shard(), *s->second.entry);
      in::copy_(dst, in::to_dtype(in::view_range(in::contiguous(src), a, {b - a}), u->dtype()));
    } else {
      Tensor dst = t;
      in::copy_(dst, in::to_dtype(src, t.dtype()));
    }
    given.erase(g);
  }
  LOCKSTEP_CHECK(missing.empty(), "load_full_state_dict: missing key(s) in state_dict: ", missing);
  std::vector<std::string> unexpected;
  for (auto& [n, _] : given) unexpected.push_back(n);
  LOCKSTEP_CHECK(unexpected.empty(), "load_full_state_dict: unexpected key(s) in state_dict: ", unexpected);
}

// --- sharded checkpoints ---

namespace {

struct IndexEntry {
  Shape shape;
  std::string dtype;
  std::vector<std::array<int64_t, 3>> slices;  // rank, begin, end
};
struct Index {
  int world_size = 0;
  int64_t step = -1;
  std::vector<std::string> files;  // rank r's file, relative to the directory
  std::map<std::string, IndexEntry> params;
};

// Reads the index.json that save_sharded_checkpoint writes.
Index read_index(const std::string& path) {
  std::ifstream f(path);
  LOCKSTEP_CHECK(f, "load_sharded_checkpoint: cannot open ", path);
  Index index;
  try {
    const auto j = nlohmann::json::parse(f);
    index.world_size = j.at("world_size").get<int>();
    if (j.contains("step")) index.step = j.at("step").get<int64_t>();
    if (j.contains("files")) index.files = j.at("files").get<std::vector<std::string>>();
    for (const auto& [name, p] : j.at("params").items()) {
      IndexEntry e;
      for (int64_t d : p.at("shape")) e.shape.push_back(d);
      e.dtype = p.at("dtype").get<std::string>();
      for (const auto& s : p.at("slices")) e.slices.push_back(s.get<std::array<int64_t, 3>>());
      index.params[name] = std::move(e);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("load_sharded_checkpoint: ", path, " is not a sharded checkpoint's index: ", e.what());
  }
  LOCKSTEP_CHECK(index.world_size > 0, "load_sharded_checkpoint: ", path, " names no world_size");
  LOCKSTEP_CHECK(index.files.empty() || index.files.size() == static_cast<size_t>(index.world_size),
                 "load_sharded_checkpoint: ", path, " names ", index.files.size(), " files for world_size ",
                 index.world_size);
  for (int r = 0; r < index.world_size && index.files.empty(); ++r) index.files.push_back(
      "rank" + std::to_string(r) + ".safetensors");
  return index;
}

// Rank r's file: rank<r>.safetensors, or rank<r>.step<N>.safetensors for a training checkpoint, so that
// a save never overwrites the files the current index names.
std::string rank_file_name(int r, int64_t step) {
  return "rank" + std::to_string(r) + (step >= 0 ? ".step" + std::to_string(step) : "") + ".safetensors";
}

// Optimizer index of each parameter handle, counted over the groups in order.
std::unordered_map<TensorImpl*, size_t> optimizer_index(const optim::Optimizer& opt) {
  std::unordered_map<TensorImpl*, size_t> out;
  auto ps = opt.params();
  for (size_t i = 0; i < ps.size(); ++i) out[ps[i].impl()] = i;
  return out;
}

const std::string kOptimizer = "optimizer.", kScheduler = "scheduler.";

}  // namespace

void save_sharded_checkpoint(const std::string& dir, const Checkpoint& what) {
  NoGradGuard no_grad;
  LOCKSTEP_CHECK(what.model, "save_sharded_checkpoint: no model given");
  nn::Module& module = *what.model;
  const optim::Optimizer* optimizer = what.optimizer;
  ProcessGroup* pg = nullptr;
  auto sharded = sharded_params(module, &pg);
  LOCKSTEP_CHECK(pg, "save_sharded_checkpoint: ", module.name(), " holds no fully_shard-ed unit");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // every rank: the directory may be on each rank's own disk
  LOCKSTEP_CHECK(std::filesystem::is_directory(dir), "save_sharded_checkpoint: cannot create the directory ", dir,
                 ec ? ": " + ec.message() : "");
  std::unordered_map<TensorImpl*, size_t> opt_index;
  if (optimizer) opt_index = optimizer_index(*optimizer);
  TensorList tensors;
  nlohmann::ordered_json params = nlohmann::ordered_json::object();
  for (auto& [name, p] : module.named_parameters()) {
    auto s = sharded.find(p.impl());
    LOCKSTEP_CHECK(s != sharded.end(), "save_sharded_checkpoint: parameter '", name, "' is in no fully_shard-ed unit");
    auto* u = s->second.unit;
    const auto& e = *s->second.entry;
    auto [mine_begin, mine_end] = u->local_range(e);
    if (mine_end > mine_begin) tensors.emplace_back(name, in::clone(u->local_view(u->shard(), e)));
    // A rank holding no element of the parameter writes nothing for it (safetensors has no empty
    // tensors at distinct offsets).
    if (optimizer && opt_index.count(p.impl()) && mine_end > mine_begin)
      for (auto& [k, t] : optimizer->state(opt_index[p.impl()]))
        tensors.emplace_back(kOptimizer + name + "." + k, in::clone(t));
    auto slices = nlohmann::ordered_json::array();
    for (int r = 0; r < pg->size(); ++r) {
      auto [a, b] = u->local_range(e, r);
      if (b > a) slices.push_back({r, a, b});
    }
    params[name] = {{"shape", std::vector<int64_t>(e.shape.begin(), e.shape.end())},
                    {"dtype", dtype_name(u->dtype())},
                    {"slices", std::move(slices)}};
  }
  std::vector<std::string> files;
  for (int r = 0; r < pg->size(); ++r) files.push_back(rank_file_name(r, what.step));
  const nlohmann::ordered_json index = {
      {"world_size", pg->size()}, {"step", what.step}, {"files", files}, {"params", std::move(params)}};
  std::map<std::string, std::string> meta = {{"format", "lockstep sharded checkpoint"},
                                             {"step", std::to_string(what.step)}};
  if (pg->rank() == 0) {
    for (auto& [name, b] : module.named_buffers()) tensors.emplace_back(name, in::clone(b));
    if (optimizer)
      for (auto& [k, t] : optimizer->state_dict())
        if (optim::is_group_key(k) && !k.ends_with(".params")) tensors.emplace_back(kOptimizer + k, t);
    if (what.scheduler)
      for (auto& [k, t] : what.scheduler->state_dict()) tensors.emplace_back(kScheduler + k, t);
    for (auto& [k, v] : what.metadata) meta.emplace(k, v);
    meta["epoch"] = std::to_string(what.epoch);
  }
  save_safetensors(dir + "/" + files[pg->rank()], tensors, meta);
  // The index last, once every rank's file is whole: until then it names the previous save's files.
  pg->barrier(false);
  if (pg->rank() == 0) {
    const std::string path = dir + "/index.json", tmp = path + ".tmp";
    {
      std::ofstream f(tmp);
      f << index.dump(2) << "\n";
      LOCKSTEP_CHECK(f.good(), "save_sharded_checkpoint: cannot write ", tmp);
    }
    LOCKSTEP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "save_sharded_checkpoint: cannot rename ", tmp, " to ",
                   path);
    // The files no index names any more: earlier saves' (and those of ranks a smaller world lacks).
    for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
      const std::string n = f.path().filename().string();
      if (n.rfind("rank", 0) == 0 && n.ends_with(".safetensors") &&
          std::find(files.begin(), files.end(), n) == files.end())
        std::filesystem::remove(f.path(), ec);
    }
  }
  pg->barrier(false);  // every file is written before any rank goes on (and may load it)
}

void save_sharded_checkpoint(const std::string& dir, nn::Module& module, const optim::Optimizer* optimizer) {
  Checkpoint what;
  what.model = &module;
  what.optimizer = const_cast<optim::Optimizer*>(optimizer);  // only read
  save_sharded_checkpoint(dir, what);
}

namespace {

// A parameter's elements in this rank's shard, and the optimizer state read for them.
struct Target {
  fsdp::Unit* unit;
  const fsdp::FlatEntry* entry;
  int64_t begin, end;                   // this rank's elements of the flattened parameter
  std::map<std::string, Tensor> state;  // optimizer state of those elements
};

// Each parameter's target, by name, once the index agrees with the model: every parameter sharded and
// saved with its shape, and no other saved.
std::map<std::string, Target> load_targets(nn::Module& module, const std::unordered_map<TensorImpl*, Sharded>& sharded,
                                           const Index& index, const std::string& dir) {
  std::map<std::string, Target> targets;
  for (auto& [name, p] : module.named_parameters()) {
    auto s = sharded.find(p.impl());
    LOCKSTEP_CHECK(s != sharded.end(), "load_sharded_checkpoint: parameter '", name, "' is in no fully_shard-ed unit");
    auto it = index.params.find(name);
    LOCKSTEP_CHECK(it != index.params.end(), "load_sharded_checkpoint: ", dir, " has no parameter '", name, "'");
    LOCKSTEP_CHECK(it->second.shape == s->second.entry->shape, "load_sharded_checkpoint: '", name, "' is ",
                   it->second.shape, " in ", dir, " but ", s->second.entry->shape, " in the model");
    auto [a, b] = s->second.unit->local_range(*s->second.entry);
    targets[name] = Target{s->second.unit, s->second.entry, a, b, {}};
  }
  LOCKSTEP_CHECK(index.params.size() == targets.size(), "load_sharded_checkpoint: ", dir, " holds ",
                 index.params.size(), " parameters, the model ", targets.size());
  return targets;
}

// Copies what this rank holds of tensor `key` of rank r's file (`path`), a parameter's slice or the slice
// of its optimizer state `state`, into the shard or tg.state. `slices`: the parameter's, from the index.
void read_slice(const std::vector<std::array<int64_t, 3>>& slices, int r, const std::string& path,
                const std::string& key, const std::string& state, const Tensor& t, Target& tg) {
  // The saved slice of rank r: elements [sb, se) of the flattened parameter.
  int64_t sb = -1, se = -1;
  for (auto& s : slices)
    if (s[0] == r) sb = s[1], se = s[2];
  LOCKSTEP_CHECK(sb >= 0 && t.numel() == se - sb, "load_sharded_checkpoint: '", key, "' in ", path, " has ",
                 t.numel(), " elements; index.json says [", sb, ", ", se, ")");
  Tensor dst;
  if (state.empty()) {
    dst = tg.unit->local_view(tg.unit->shard(), *tg.entry);
  } else {
    auto& st = tg.state[state];
    if (!st.defined()) st = zeros({tg.end - tg.begin}, TensorOptions(t.dtype()));
    dst = st;
  }
  const int64_t lo = std::max(sb, tg.begin), hi = std::min(se, tg.end);
  if (hi <= lo) return;
  Tensor part = in::view_range(dst, lo - tg.begin, {hi - lo});
  in::copy_(part, in::to_dtype(in::view_range(t, lo - sb, {hi - lo}), dst.dtype()));
}

// Reads rank r's file: its slices of the parameters and of their optimizer state into `targets`, the
// buffers into the model, and the optimizer's group options and the scheduler's state (rank 0's file
// holds these) into `groups` and `scheduler`. Returns the file's metadata.
std::map<std::string, std::string> read_rank_file(const std::string& dir, const Index& index, int r,
                                                  std::map<std::string, Target>& targets, nn::NamedTensors& buffers,
                                                  optim::StateDict& groups, optim::StateDict& scheduler) {
  const std::string path = dir + "/" + index.files[r];
  SafetensorsFile file = load_safetensors(path);
  auto step = file.metadata.find("step");
  LOCKSTEP_CHECK(index.step < 0 || (step != file.metadata.end() && step->second == std::to_string(index.step)),
                 "load_sharded_checkpoint: ", path, " is from step ", step != file.metadata.end() ? step->second : "?",
                 ", index.json from step ", index.step, " (files of different saves)");
  for (auto& [key, t] : file.tensors) {
    std::string name = key, state;
    if (key.starts_with(kOptimizer) && optim::is_group_key(std::string_view(key).substr(kOptimizer.size()))) {
      groups.emplace_back(key.substr(kOptimizer.size()), t);
      continue;
    }
    if (key.rfind(kScheduler, 0) == 0) {
      scheduler.emplace_back(key.substr(kScheduler.size()), t);
      continue;
    }
    if (key.rfind(kOptimizer, 0) == 0) {
      const size_t dot = key.rfind('.');
      name = key.substr(kOptimizer.size(), dot - kOptimizer.size());
      state = key.substr(dot + 1);
    }
    auto target = targets.find(name);
    if (target == targets.end()) {
      for (auto& [bn, b] : buffers)
        if (bn == key) in::copy_(b, in::to_dtype(t, b.dtype()));
      continue;
    }
    if (optim::is_scalar_state(state)) {  // whole on every rank, not sliced
      target->second.state[state] = t;
      continue;
    }
    read_slice(index.params.at(name).slices, r, path, key, state, t, target->second);
  }
  return std::move(file.metadata);
}

// Hands `optimizer` the state read: each parameter's under this optimizer's index of it, the saved
// groups' options, and each group's parameter list.
void load_optimizer_state(optim::Optimizer& optimizer, const std::map<std::string, Target>& targets,
                          const optim::StateDict& groups, const std::string& dir) {
  auto opt_index = optimizer_index(optimizer);
  optim::StateDict sd;
  for (auto& [name, tg] : targets) {
    auto it = opt_index.find(tg.entry->param.impl());
    if (it == opt_index.end()) continue;
    for (auto& [k, t] : tg.state) sd.emplace_back(optim::state_key(it->second, k), t);
  }
  LOCKSTEP_CHECK(!groups.empty(), "load_sharded_checkpoint: ", dir, " holds no optimizer state");
  // The saved groups' options: as many groups as this optimizer has (their indices are this optimizer's).
  size_t saved_groups = 0;
  for (auto& [k, t] : groups)
    saved_groups = std::max(saved_groups, optim::parse_state_key(k, "load_sharded_checkpoint").index + 1);
  LOCKSTEP_CHECK(saved_groups == optimizer.num_param_groups(), "load_sharded_checkpoint: ", dir, " holds ",
                 saved_groups, " param group(s) of optimizer state, the ", optimizer.name(), " has ",
                 optimizer.num_param_groups());
  for (auto& g : groups) sd.push_back(g);
  std::vector<size_t> sizes;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) sizes.push_back(optimizer.params(g).size());
  for (auto& entry : optim::group_params_entries(sizes)) sd.push_back(std::move(entry));
  optimizer.load_state_dict(sd);
}

}  // namespace

Checkpoint load_sharded_checkpoint(const std::string& dir, const Checkpoint& into) {
  NoGradGuard no_grad;
  LOCKSTEP_CHECK(into.model, "load_sharded_checkpoint: no model given");
  nn::Module& module = *into.model;
  ProcessGroup* pg = nullptr;
  auto sharded = sharded_params(module, &pg);
  LOCKSTEP_CHECK(pg, "load_sharded_checkpoint: ", module.name(), " holds no fully_shard-ed unit");
  const Index index = read_index(dir + "/index.json");
  std::map<std::string, Target> targets = load_targets(module, sharded, index, dir);
  optim::StateDict groups, scheduler;
  Checkpoint out = into;
  auto buffers = module.named_buffers();
  for (int r = 0; r < index.world_size; ++r) {
    auto metadata = read_rank_file(dir, index, r, targets, buffers, groups, scheduler);
    if (r == 0) out.metadata = std::move(metadata);
  }
  if (into.optimizer) load_optimizer_state(*into.optimizer, targets, groups, dir);
  if (into.scheduler) {
    LOCKSTEP_CHECK(!scheduler.empty(), "load_sharded_checkpoint: ", dir, " holds no scheduler state (was it saved "
                   "with one?)");
    into.scheduler->load_state_dict(scheduler);
  }
  auto number = [&](const char* key) {
    auto it = out.metadata.find(key);
    return it == out.metadata.end() ? int64_t{-1} : std::stoll(it->second);
  };
  out.epoch = number("epoch");
  out.step = number("step");
  return out;
}

void load_sharded_checkpoint(const std::string& dir, nn::Module& module, optim::Optimizer* optimizer) {
  Checkpoint into;
  into.model = &module;
  into.optimizer = optimizer;
  load_sharded_checkpoint(dir, into);
}

}  // namespace lockstep::dist
