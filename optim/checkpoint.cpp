// save_checkpoint / load_checkpoint (checkpoint.h): one flat safetensors file with prefixes.
#include "optim/checkpoint.h"

#include <cstdlib>

#include "tensor/safetensors.h"

namespace lockstep {
namespace {

constexpr char kFormat[] = "lockstep checkpoint";
const std::string kOptimizer = "optimizer.";
const std::string kScheduler = "scheduler.";

bool has_prefix(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

int64_t parse_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  if (it == meta.end()) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  LOCKSTEP_CHECK(!it->second.empty() && *end == '\0', "load_checkpoint: ", path, ": metadata '", key, "' is '",
                 it->second, "', not an integer");
  return v;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& what) {
  TensorList tensors;
  if (what.model) {
    for (auto& [name, t] : what.model->state_dict()) {
      LOCKSTEP_CHECK(!has_prefix(name, kOptimizer) && !has_prefix(name, kScheduler), "save_checkpoint: model entry '",
                     name, "' starts with a prefix the checkpoint reserves ('optimizer.', 'scheduler.')");
      tensors.emplace_back(name, t);
    }
  }
  LOCKSTEP_CHECK(!(what.optimizer && what.optimizer_state), "save_checkpoint: give an optimizer or an optimizer_state, "
                 "not both");
  if (what.optimizer)
    for (auto& [k, t] : what.optimizer->state_dict()) tensors.emplace_back(kOptimizer + k, t);
  if (what.optimizer_state)
    for (auto& [k, t] : *what.optimizer_state) tensors.emplace_back(kOptimizer + k, t);
  if (what.scheduler)
    for (auto& [k, t] : what.scheduler->state_dict()) tensors.emplace_back(kScheduler + k, t);
  std::map<std::string, std::string> meta = what.metadata;
  meta["format"] = kFormat;
  meta["epoch"] = std::to_string(what.epoch);
  meta["step"] = std::to_string(what.step);
  save_safetensors(path, tensors, meta);
}

Checkpoint load_checkpoint(const std::string& path, const Checkpoint& into) {
  SafetensorsFile file = load_safetensors(path);
  nn::NamedTensors model;
  optim::StateDict optimizer, scheduler;
  for (auto& [k, t] : file.tensors) {
    if (has_prefix(k, kOptimizer)) optimizer.emplace_back(k.substr(kOptimizer.size()), t);
    else if (has_prefix(k, kScheduler)) scheduler.emplace_back(k.substr(kScheduler.size()), t);
    else model.emplace_back(k, t);
  }
  // Optimizer before scheduler, as PyTorch's resume order: the scheduler's state refers to the groups.
  if (into.model) into.model->load_state_dict(model);
  if (into.optimizer || into.optimizer_state) {
    LOCKSTEP_CHECK(!optimizer.empty(), "load_checkpoint: ", path, " holds no optimizer state (was it saved with "
                   "one?)");
    if (into.optimizer) into.optimizer->load_state_dict(optimizer);
    if (into.optimizer_state) *into.optimizer_state = optimizer;
  }
  if (into.scheduler) {
    LOCKSTEP_CHECK(!scheduler.empty(), "load_checkpoint: ", path, " holds no scheduler state (was it saved with "
                   "one?)");
    into.scheduler->load_state_dict(scheduler);
  }
  Checkpoint out = into;
  out.metadata = file.metadata;
  out.epoch = parse_int(file.metadata, "epoch", path);
  out.step = parse_int(file.metadata, "step", path);
  return out;
}

}  // namespace lockstep
