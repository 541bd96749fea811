// Checkpoints: a model, its optimizer, its lr scheduler and the training position in one safetensors
// file, written atomically (save_safetensors: a crash mid-save leaves the previous file whole) by one
// call and read back by one call.
//
// Keys in the file:
//   <name>                   the model's state_dict under PyTorch's dotted names ("fc1.weight", ...)
//   optimizer.<key>          Optimizer::state_dict (optim/optimizer.h lists its keys)
//   scheduler.<key>          LRScheduler::state_dict (optim/lr_scheduler.h)
// and in the metadata: "format" = "lockstep checkpoint", "epoch", "step", plus any of the caller's.
// In PyTorch the model part loads with
//   sd = safetensors.torch.load_file(path)
//   model.load_state_dict({k: v for k, v in sd.items() if not k.startswith(("optimizer.", "scheduler."))})
// A file holding only a model's weights (save_safetensors(path, model.state_dict())) is a checkpoint
// without optimizer and scheduler, so load_checkpoint reads initial weights too.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace lockstep {

// What a checkpoint holds; null parts are neither saved nor loaded.
struct Checkpoint {
  nn::Module* model = nullptr;  // under DDP, the wrapped module (its names are the model's own)
  optim::Optimizer* optimizer = nullptr;
  // In place of `optimizer`: a state_dict saved as it is, or filled on load with the file's (a
  // ZeroRedundancyOptimizer's consolidated state, which no one optimizer holds).
  optim::StateDict* optimizer_state = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  int64_t epoch = -1;  // the last finished epoch (-1: none)
  int64_t step = -1;   // the last finished optimizer step (-1: none)
  std::map<std::string, std::string> metadata;
};

// Writes `what` to `path` atomically. Tensors on a GPU are copied to the host.
void save_checkpoint(const std::string& path, const Checkpoint& what);

// Loads `path` into the given parts (the model strictly: missing or unexpected weights are errors, each
// naming the key) and returns what the file says: its epoch, step and metadata, with `model`, `optimizer`
// and `scheduler` as given. A part given but absent from the file is an error naming the file.
Checkpoint load_checkpoint(const std::string& path, const Checkpoint& into);

}  // namespace lockstep
