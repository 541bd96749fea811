// run_group: a function as W ranks (tests/util/multiprocess.h), each with its own ProcessGroupGloo met over
// one FileStore in a fresh directory: the process-group tests' harness.
//
//   ProcessGroupGloo::Options options;
//   options.timeout = milliseconds(5000);
//   auto results = testing::run_group(2, options, [&](ProcessGroupGloo& pg, int rank) { ... });
//   CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
#pragma once

#include <stdlib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/gloo/process_group_gloo.h"
#include "distributed/store/file_store.h"
#include "tests/util/multiprocess.h"
#include "tests/util/test_util.h"

namespace lockstep::testing {

// How run_group runs its ranks, beyond the group's own options.
struct GroupRun {
  std::chrono::milliseconds store_timeout{20000};  // the FileStore's waits
  // How long the ranks may take in all (then they are killed): run_ranks's default when unset.
  std::optional<std::chrono::milliseconds> ranks_timeout = std::nullopt;
  // LOCKSTEP_DISTRIBUTED_DEBUG for the ranks ("" unsets it); unset: left as the test process has it.
  std::optional<std::string> debug = std::nullopt;
};

// Runs fn(pg, rank) as `world_size` ranks, each with a ProcessGroupGloo made with `options`, and
// returns how each ended.
inline std::vector<RankResult> run_group(int world_size, const dist::ProcessGroupGloo::Options& options,
                                         const std::function<void(dist::ProcessGroupGloo& pg, int rank)>& fn,
                                         const GroupRun& run = {}) {
  TempDir dir("lockstep_group");
  auto rank_main = [&](int rank) {
    if (run.debug) {
      if (run.debug->empty()) ::unsetenv("LOCKSTEP_DISTRIBUTED_DEBUG");
      else ::setenv("LOCKSTEP_DISTRIBUTED_DEBUG", run.debug->c_str(), 1);
    }
    auto store = std::make_shared<dist::FileStore>(dir.path + "/store", world_size, run.store_timeout);
    dist::ProcessGroupGloo pg(store, rank, world_size, options);
    fn(pg, rank);
  };
  return run.ranks_timeout ? run_ranks(world_size, rank_main, *run.ranks_timeout) : run_ranks(world_size, rank_main);
}

}  // namespace lockstep::testing
