// The keys of an optimizer's state_dict (optimizer.h states the format): made and read here alone, so
// that the optimizers, ZeroRedundancyOptimizer and fully_shard's checkpoints spell them one way and
// reject a malformed one with the same message.
//   state.<i>.<name>             parameter i's state
//   param_groups.<g>.<name>      group g's option <name>; "params" holds the group's parameter indices
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"

namespace lockstep::optim {

struct StateKey {
  enum class Kind { kState, kGroup };
  Kind kind = Kind::kState;
  size_t index = 0;  // the parameter's (state) or the group's (param_groups)
  std::string name;  // after the index: "exp_avg", "lr", "params"...
};

std::string state_key(size_t param, std::string_view name);  // "state.<param>.<name>"
std::string group_key(size_t group, std::string_view name);  // "param_groups.<group>.<name>"

// True for a param_groups.* key, without parsing it further.
bool is_group_key(std::string_view key);
// Per-parameter state that is one number rather than a tensor shaped like the parameter (PyTorch keeps
// these as float32 []): the step count and NAdam's mu_product. Checkpoints and sharding read them whole.
bool is_scalar_state(std::string_view name);

// Parses either form; throws, naming `who` (the caller's name, e.g. "Adam.load_state_dict") and the key,
// when it is neither or its index is not a decimal number.
StateKey parse_state_key(std::string_view key, std::string_view who);

// For groups of `sizes[g]` parameters each, counted across the groups in order: the entries
// param_groups.<g>.params = int64 [first, first + sizes[g]), one per group, in group order.
StateDict group_params_entries(const std::vector<size_t>& sizes);

}  // namespace lockstep::optim
