// The CPU allocator's block cache (tensor/cpu/block_cache.h), as lockstep::cuda's memory functions are
// for the CUDA one: the bytes it holds for reuse, and handing them all back to the system. Worth calling
// after a one-off change of sizes (a model sharded by fully_shard frees blocks of the full parameters
// that no later allocation has the size of) so that they stop counting in the resident set.
#pragma once

#include <cstddef>

namespace lockstep::cpu {

size_t memory_cached();
void empty_cache();

}  // namespace lockstep::cpu
