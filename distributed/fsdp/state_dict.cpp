// Full and sharded state dicts of fully_shard-ed models (state_dict.h).
#include "distributed/fsdp/state_dict.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "distributed/fsdp/unit.h"
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
  return index;
}

std::string rank_file(const std::string& dir, int r) { return dir + "/rank" + std::to_string(r) + ".safetensors"; }

// Optimizer index of each parameter handle.
std::unordered_map<TensorImpl*, size_t> optimizer_index(const optim::Optimizer& opt) {
  LOCKSTEP_CHECK(opt.num_param_groups() == 1, "sharded checkpoint: ", opt.name(), " has ", opt.num_param_groups(),
                 " param groups; one is supported");
  std::unordered_map<TensorImpl*, size_t> out;
  auto ps = opt.params();
  for (size_t i = 0; i < ps.size(); ++i) out[ps[i].impl()] = i;
  return out;
}

}  // namespace

void save_sharded_checkpoint(const std::string& dir, nn::Module& module, const optim::Optimizer* optimizer) {
  NoGradGuard no_grad;
  ProcessGroup* pg = nullptr;
  auto sharded = sharded_params(module, &pg);
  LOCKSTEP_CHECK(pg, "save_sharded_checkpoint: ", module.name(), " holds no fully_shard-ed unit");
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
      for (auto& [k, t] : optimizer->state(opt_index[p.impl()])) tensors.emplace_back("optimizer." + name + "." + k, in::clone(t));
    auto slices = nlohmann::ordered_json::array();
    for (int r = 0; r < pg->size(); ++r) {
      auto [a, b] = u->local_range(e, r);
      if (b > a) slices.push_back({r, a, b});
    }
    params[name] = {{"shape", std::vector<int64_t>(e.shape.begin(), e.shape.end())},
                    {"dtype", dtype_name(u->dtype())},
                    {"slices", std::move(slices)}};
  }
  const nlohmann::ordered_json index = {{"world_size", pg->size()}, {"params", std::move(params)}};
  if (pg->rank() == 0) {
    for (auto& [name, b] : module.named_buffers()) tensors.emplace_back(name, in::clone(b));
    if (optimizer)
      for (auto& [k, t] : optimizer->state_dict())
        if (k.rfind("param_groups.", 0) == 0 && !k.ends_with(".params")) tensors.emplace_back("optimizer." + k, t);
  }
  save_safetensors(rank_file(dir, pg->rank()), tensors, {{"format", "lockstep sharded checkpoint"}});
  if (pg->rank() == 0) {
    const std::string path = dir + "/index.json", tmp = path + ".tmp";
    {
      std::ofstream f(tmp);
      f << index.dump(2) << "\n";
      LOCKSTEP_CHECK(f.good(), "save_sharded_checkpoint: cannot write ", tmp);
    }
    LOCKSTEP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "save_sharded_checkpoint: cannot rename ", tmp, " to ",
                   path);
  }
  pg->barrier(false);  // every file is written before any rank goes on (and may load it)
}

void load_sharded_checkpoint(const std::string& dir, nn::Module& module, optim::Optimizer* optimizer) {
  NoGradGuard no_grad;
  ProcessGroup* pg = nullptr;
  auto sharded = sharded_params(module, &pg);
  LOCKSTEP_CHECK(pg, "load_sharded_checkpoint: ", module.name(), " holds no fully_shard-ed unit");
  const Index index = read_index(dir + "/index.json");
  struct Target {
    fsdp::Unit* unit;
    const fsdp::FlatEntry* entry;
    int64_t begin, end;                  // this rank's elements of the flattened parameter
    std::map<std::string, Tensor> state;  // optimizer state of those elements
  };
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
  optim::StateDict groups;
  auto buffers = module.named_buffers();
  for (int r = 0; r < index.world_size; ++r) {
    SafetensorsFile file = load_safetensors(rank_file(dir, r));
    for (auto& [key, t] : file.tensors) {
      std::string name = key, state;
      if (key.rfind("optimizer.param_groups.", 0) == 0) {
        groups.emplace_back(key.substr(10), t);
        continue;
      }
      if (key.rfind("optimizer.", 0) == 0) {
        const size_t dot = key.rfind('.');
        name = key.substr(10, dot - 10);
        state = key.substr(dot + 1);
      }
      auto target = targets.find(name);
      if (target == targets.end()) {
        for (auto& [bn, b] : buffers)
          if (bn == key) in::copy_(b, in::to_dtype(t, b.dtype()));
        continue;
      }
      Target& tg = target->second;
      if (state == "step") {
        tg.state["step"] = t;
        continue;
      }
      // The saved slice of rank r: elements [sb, se) of the flattened parameter.
      int64_t sb = -1, se = -1;
      for (auto& s : index.params.at(name).slices)
        if (s[0] == r) sb = s[1], se = s[2];
      LOCKSTEP_CHECK(sb >= 0 && t.numel() == se - sb, "load_sharded_checkpoint: '", key, "' in ", rank_file(dir, r),
                     " has ", t.numel(), " elements; index.json says [", sb, ", ", se, ")");
      Tensor dst;
      if (state.empty()) {
        dst = tg.unit->local_view(tg.unit->shard(), *tg.entry);
      } else {
        auto& st = tg.state[state];
        if (!st.defined()) st = zeros({tg.end - tg.begin}, TensorOptions(t.dtype()));
        dst = st;
      }
      const int64_t lo = std::max(sb, tg.begin), hi = std::min(se, tg.end);
      if (hi <= lo) continue;
      Tensor part = in::view_range(dst, lo - tg.begin, {hi - lo});
      in::copy_(part, in::to_dtype(in::view_range(t, lo - sb, {hi - lo}), dst.dtype()));
    }
  }
  if (!optimizer) return;
  auto opt_index = optimizer_index(*optimizer);
  optim::StateDict sd;
  for (auto& [name, tg] : targets) {
    auto it = opt_index.find(tg.entry->param.impl());
    if (it == opt_index.end()) continue;
    for (auto& [k, t] : tg.state) sd.emplace_back("state." + std::to_string(it->second) + "." + k, t);
  }
  LOCKSTEP_CHECK(!groups.empty(), "load_sharded_checkpoint: ", dir, " holds no optimizer state");
  for (auto& g : groups) sd.push_back(g);
  sd.emplace_back("param_groups.0.params", arange(static_cast<int64_t>(opt_index.size())));
  optimizer->load_state_dict(sd);
}

}  // namespace lockstep::dist
