// launch: starts the local ranks of a data-parallel job (torchrun's static mode).
//
//   launch --nproc_per_node 4 ./train --epochs 3
//   launch --nnodes 2 --node_rank 1 --nproc_per_node 8 --master_addr 10.0.0.1 --master_port 29500 ./train
//
// Each rank gets its identity through the environment only (no --local_rank argument), as torchrun
// does: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR,
// MASTER_PORT, LOCKSTEP_RESTART_COUNT, and OMP_NUM_THREADS=1 unless already set. When a rank fails the
// others are stopped (SIGTERM, then SIGKILL after a grace period) and the launcher exits with the
// failed rank's status, so a job never hangs on a dead peer. Every rank that failed is named with its
// status; when several did, the one that died of a signal (killed, crashed) is taken as the cause
// rather than a survivor that exited because its peer died, else the first to fail (ranks that fail
// while being stopped are listed, never taken as the cause).
//
// MASTER_PORT, when the launcher picks it: the launcher binds a free port without listening (a
// reservation, Socket::reserve) and holds it while the ranks run, so the kernel does not hand it out
// as an ephemeral port and plain binds fail, while rank 0's TCPStore can still listen on it (a
// program that binds with SO_REUSEADDR, as rank 0 does, is not kept out). Should another program
// still take it first, rank 0's init_process_group writes "address-in-use HOST:PORT" to the pipe
// passed in LOCKSTEP_LAUNCH_STATUS_FD, and the launcher stops the ranks and starts them again on a
// fresh port (up to kMaxPortRetries times; these retries are not --max_restarts restarts).
//
// The job token (distributed/net/job_token.h): unless LOCKSTEP_JOB_TOKEN or LOCKSTEP_JOB_TOKEN_FILE is
// set already (then it is checked here and passed on as it is), every rank gets the same fresh token
// in LOCKSTEP_JOB_TOKEN, so only this job's processes can join its store, mesh and shared memory. A
// multi-node job needs one token on every node, which separate launchers cannot agree on by
// themselves: with --nnodes > 1 and none set, the job runs without one (and the launcher says so).
//
// Here: the options, the job token, the port and the restart loop. Spawning, watching and stopping the
// ranks, and CPU binding (--cpu-bind), are local_group.cpp's.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "distributed/launch/local_group.h"
#include "distributed/net/job_token.h"
#include "distributed/net/socket.h"
#include "common/check.h"
#include "common/env.h"

namespace {

using lockstep::Error;
using lockstep::fail;
using lockstep::dist::launch::Options;
using lockstep::dist::launch::Outcome;

constexpr int kMaxPortRetries = 3;

void validate(const Options& o) {
  LOCKSTEP_CHECK(!o.command.empty(), "no program given (usage: launch [options] program [args...]; see --help)");
  LOCKSTEP_CHECK(o.command[0].empty() || o.command[0][0] != '-', "unknown option '", o.command[0],
                 "' (launch's options go before the program; see --help)");
  LOCKSTEP_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node_rank ", o.node_rank, " is outside [0, ", o.nnodes,
                 ") for --nnodes ", o.nnodes);
  LOCKSTEP_CHECK(o.nnodes == 1 || o.master_port != 0,
                 "--nnodes ", o.nnodes, " needs --master_port (every node must agree on it)");
}

// The token every rank gets (empty: the user's LOCKSTEP_JOB_TOKEN or _FILE, passed on as it is, or none).
std::string job_token(const Options& o) {
  using lockstep::dist::JobToken;
  const bool given = lockstep::env_string(JobToken::kEnvVar) || lockstep::env_string(JobToken::kFileEnvVar);
  if (given) {
    JobToken::from_env();  // a bad file or a short token fails here, once, rather than in every rank
    return "";
  }
  if (o.nnodes == 1) return JobToken::generate();
  std::fprintf(stderr, "launch: --nnodes %d and neither %s nor %s is set: the job runs without a job token (set the "
               "same one on every node to have one)\n", o.nnodes, JobToken::kEnvVar, JobToken::kFileEnvVar);
  return "";
}

// A free port on the master's address, held (bound, not listening) until the returned socket closes.
lockstep::dist::Socket reserve_port(const std::string& addr) {
  try {
    return lockstep::dist::Socket::reserve(addr, 0);
  } catch (const Error& e) {
    fail("cannot pick a free MASTER_PORT: ", e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  CLI::App app{"launch [options] program [args...]: runs --nproc_per_node copies of the program as the\n"
               "local ranks of one job. Everything from the program name on is passed to it untouched."};
  app.prefix_command();  // everything from the program name on is the program's, untouched
  app.add_option("--nproc_per_node,--nproc-per-node", opts.nproc_per_node, "ranks to start on this node")
      ->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", opts.nnodes, "nodes in the job")->check(CLI::Range(1, 1 << 20));
  app.add_option("--node_rank,--node-rank", opts.node_rank, "this node's index in [0, nnodes)");
  app.add_option("--master_addr,--master-addr", opts.master_addr, "address of rank 0's node")->capture_default_str();
  app.add_option("--master_port,--master-port", opts.master_port,
                 "rank 0's rendezvous port; default: a free port (single node only)")
      ->check(CLI::Range(1, 65535));
  app.add_flag("--prefix-output,--prefix_output,--tee", opts.prefix_output,
               "prefix each line of the ranks' stdout/stderr with [rankR]: (off by default)");
  app.add_option("--max_restarts,--max-restarts", opts.max_restarts,
                 "restart the whole local group up to this many times when a rank fails")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace_period,--grace-period", opts.grace_period_s,
                 "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--cpu-bind,--cpu_bind", opts.cpu_bind,
                 "auto: bind local rank i to the i-th of nproc_per_node equal blocks of the CPUs launch may use,\n"
                 "when there are at least as many CPUs as ranks; none: leave placement to the scheduler")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  app.footer(
      "Each rank's environment: RANK = node_rank * nproc_per_node + LOCAL_RANK, LOCAL_RANK, WORLD_SIZE,\n"
      "LOCAL_WORLD_SIZE, GROUP_RANK = NODE_RANK, MASTER_ADDR, MASTER_PORT, LOCKSTEP_RESTART_COUNT, and\n"
      "OMP_NUM_THREADS=1 unless set. When a rank exits non-zero or is killed, the other ranks get SIGTERM\n"
      "(then SIGKILL after --grace_period) and launch exits with that rank's status (128+N for signal N).\n"
      "SIGINT/SIGTERM/SIGHUP sent to launch are passed to the ranks. --max_restarts restarts only this\n"
      "node's ranks; other nodes must fail and restart too for a multi-node job to recover. Without\n"
      "--master_port, launch holds a free port for rank 0; if rank 0 still finds it taken, the ranks are\n"
      "started again on another port (up to 3 times; not counted as restarts). Every rank gets a fresh\n"
      "LOCKSTEP_JOB_TOKEN (the job token) unless LOCKSTEP_JOB_TOKEN or LOCKSTEP_JOB_TOKEN_FILE is set\n"
      "(with --nnodes > 1: set one on every node, or the job runs without a token). With no more ranks\n"
      "than CPUs, each rank is bound to its own block of them (--cpu-bind none: not bound).");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a usage error: 2, as getopt-style tools do
  }
  opts.command = app.remaining();
  if (!opts.command.empty() && opts.command[0] == "--") opts.command.erase(opts.command.begin());

  try {
    validate(opts);
    opts.job_token = job_token(opts);
    lockstep::dist::launch::install_signal_handlers();
    int port_retries = 0;
    for (int restart = 0;;) {
      // A fresh port per attempt: the previous master's may still be held by a straggler.
      lockstep::dist::Socket reservation;
      uint16_t port = static_cast<uint16_t>(opts.master_port);
      if (!port) {
        reservation = reserve_port(opts.master_addr);
        port = reservation.local_port();
      }
      Outcome outcome =
          lockstep::dist::launch::run_local_group(opts, port, restart, /*watch_port=*/opts.master_port == 0);
      if (outcome.kind == Outcome::kPortInUse) {
        if (port_retries == kMaxPortRetries) {
          std::fprintf(stderr, "launch: giving up: rank 0 found %d ports in a row taken\n", kMaxPortRetries + 1);
          return outcome.exit_code;
        }
        ++port_retries;
        std::fprintf(stderr, "launch: starting the ranks again on another port (port retry %d of %d)\n",
                     port_retries, kMaxPortRetries);
        continue;
      }
      if (outcome.kind != Outcome::kFailed || restart >= opts.max_restarts) return outcome.exit_code;
      ++restart;
      std::fprintf(stderr, "launch: restarting all %d local rank(s) (restart %d of %d)\n", opts.nproc_per_node,
                   restart, opts.max_restarts);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "launch: %s\n", e.what());
    bool spawn_failed = std::string_view(e.what()).starts_with("cannot start");
    return spawn_failed ? 127 : 1;  // 127: the shell's "command not found"
  }
}
