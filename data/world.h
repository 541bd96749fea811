// The hook through which data/ learns the process group's world without depending on distributed/:
// init_process_group sets default_world_provider() to a function returning {world_size, rank}, and
// destroy_process_group clears it. DistributedSampler calls it when num_replicas or rank is not given.
#pragma once

#include <functional>
#include <utility>

namespace lockstep::data {

// {world_size, rank} of the initialized process group; empty when none is initialized.
std::function<std::pair<int, int>()>& default_world_provider();

}  // namespace lockstep::data
