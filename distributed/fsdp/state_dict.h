// Checkpoints of fully_shard-ed models: the full state dict (torch.distributed.checkpoint.state_dict's
// get_model_state_dict with full_state_dict=True) and a sharded checkpoint directory that loads at any
// world size (as torch.distributed.checkpoint's resharding load).
//
// Sharded checkpoint layout, in `dir`:
//   rank<r>.safetensors   rank r's part of every parameter, a 1-D slice of its flattened elements
//                         under the parameter's name; the optimizer's state of that slice under
//                         optimizer.<name>.<state> (exp_avg, ...; step as the optimizer keeps it) and,
//                         in rank 0's file, the optimizer's options (optimizer.param_groups.<g>.*, every
//                         group), the scheduler's state (scheduler.*), every buffer, and the epoch, step and
//                         caller's metadata. A training checkpoint (a step given) names the files
//                         rank<r>.step<N>.safetensors.
//   index.json            {"world_size": W, "step": N, "files": ["rank0.safetensors", ...],
//                         "params": {"<name>": {"shape": [..], "dtype": "float32",
//                         "slices": [[rank, begin, end], ...]}, ...}}: which file each rank wrote and which
//                         elements [begin, end) of each flattened parameter it holds.
// A save writes every rank's file, then (after a barrier) the index, then removes the files the index
// no longer names: a run killed mid-save leaves the previous checkpoint whole. Loading at another world
// size reads, for each parameter, the overlap of this rank's new slice with each saved slice (every file
// is read whole, one at a time). The optimizer's state is matched to parameters by name; its param groups
// by number (build the optimizer over the same groups).
#pragma once

#include <string>

#include "nn/module.h"
#include "optim/checkpoint.h"
#include "optim/optimizer.h"

namespace lockstep::dist {

// The state_dict of `module` (fully_shard-ed, or holding fully_shard-ed units) with every sharded
// parameter gathered into its full shape, under the model's own names (tied parameters under each of
// their names, as Module::state_dict). Collective. With rank0_only, the other ranks get an empty list.
nn::NamedTensors full_state_dict(nn::Module& module, bool rank0_only = false);
// Loads a full state dict (every rank gives the same one, e.g. read from one file) into the shards;
// strict: missing or unexpected names are errors, each naming the key.
void load_full_state_dict(nn::Module& module, const nn::NamedTensors& state);

// Writes the sharded checkpoint (see above) of `module` and, when given, of `optimizer` (built over
// module->parameters(), in any param groups). Collective; `dir` is created where missing.
void save_sharded_checkpoint(const std::string& dir, nn::Module& module, const optim::Optimizer* optimizer = nullptr);
// Loads a sharded checkpoint saved at any world size into `module` (sharded at this world size) and,
// when given, `optimizer`.
void load_sharded_checkpoint(const std::string& dir, nn::Module& module, optim::Optimizer* optimizer = nullptr);

// A training run's state as one sharded checkpoint (torch.distributed.checkpoint.save of the model's,
// optimizer's and scheduler's state dicts and the position): what.model (fully_shard-ed), what.optimizer
// over its shards, what.scheduler, and epoch, step and metadata, as save_checkpoint's. Collective.
void save_sharded_checkpoint(const std::string& dir, const Checkpoint& what);
// Loads the parts `into` names (a part given but absent from the checkpoint is an error) and returns the
// epoch, step and metadata saved, as load_checkpoint. Any world size; each rank reads the files it needs
// (no collectives).
Checkpoint load_sharded_checkpoint(const std::string& dir, const Checkpoint& into);

}  // namespace lockstep::dist
