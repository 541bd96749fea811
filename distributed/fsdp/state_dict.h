// Checkpoints of fully_shard-ed models: the full state dict (torch.distributed.checkpoint.state_dict's
// get_model_state_dict with full_state_dict=True) and a sharded checkpoint directory that loads at any
// world size (as torch.distributed.checkpoint's resharding load).
//
// Sharded checkpoint layout, in `dir`:
//   rank<r>.safetensors   rank r's part of every parameter, a 1-D slice of its flattened elements
//                         under the parameter's name; the optimizer's state of that slice under
//                         optimizer.<name>.<state> (exp_avg, ...; step as the optimizer keeps it) and,
//                         in rank 0's file, the optimizer's options (optimizer.param_groups.0.*); every
//                         buffer in rank 0's file.
//   index.json            {"world_size": W, "params": {"<name>": {"shape": [..], "dtype": "float32",
//                         "slices": [[rank, begin, end], ...]}, ...}}: which ranks hold which elements
//                         [begin, end) of each flattened parameter.
// Loading at another world size reads, for each parameter, the overlap of this rank's new slice with
// each saved slice (every file is read whole, one at a time).
#pragma once

#include <string>

#include "nn/module.h"
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
// module->parameters(), single param group). Collective; `dir` must exist on every rank's file system.
void save_sharded_checkpoint(const std::string& dir, nn::Module& module, const optim::Optimizer* optimizer = nullptr);
// Loads a sharded checkpoint saved at any world size into `module` (sharded at this world size) and,
// when given, `optimizer`.
void load_sharded_checkpoint(const std::string& dir, nn::Module& module, optim::Optimizer* optimizer = nullptr);

}  // namespace lockstep::dist
