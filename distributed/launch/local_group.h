// What launch.cpp's main hands the local group (local_group.cpp) and what one attempt at running the
// node's ranks comes to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::dist::launch {

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free one (single node only)
  bool prefix_output = false;
  int max_restarts = 0;
  double grace_period_s = 5;
  std::string job_token;  // set in every rank's LOCKSTEP_JOB_TOKEN when not empty
  std::string cpu_bind = "auto";  // auto or none
  std::vector<std::string> command;
};

struct Outcome {
  enum Kind { kSucceeded, kFailed, kInterrupted, kPortInUse } kind;
  int exit_code;
};

// Routes SIGCHLD, SIGINT, SIGTERM and SIGHUP to run_local_group's loop and ignores SIGPIPE; once, before
// the first group.
void install_signal_handlers();

// One attempt at running the node's ranks, from spawn to the last exit. watch_port: the launcher chose
// master_port, and rank 0 may report it taken (kPortInUse). Throws Error ("cannot start ..." when the
// program cannot be spawned).
Outcome run_local_group(const Options& opts, uint16_t master_port, int restart_count, bool watch_port);

}  // namespace lockstep::dist::launch
