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
// CPU binding (--cpu-bind, default auto): when the node's ranks are no more than the CPUs the launcher
// may run on, rank i is bound to the i-th of nproc_per_node equal blocks of those CPUs, taken in the
// order of their package and core (whole cores per rank where the count allows), as Open MPI binds
// by default. Left to the scheduler, two ranks on a 2-core machine sometimes share one
// core for a whole run: their shared-memory collectives then hand over by yielding (5.7 us per 4-byte
// all-reduce instead of 0.6-1.0, measured) and their compute halves. A rank inherits its mask from the
// launcher, which takes each block itself just around the rank's spawn, so no thread of the rank ever
// runs unbound. With more ranks than CPUs, or --cpu-bind none, ranks run where the launcher may.
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distributed/launch/cpu_binding.h"
#include "distributed/net/job_token.h"
#include "distributed/net/socket.h"
#include "common/check.h"
#include "common/env.h"
#include "common/file_io.h"

extern char** environ;

namespace {

using lockstep::Error;
using lockstep::fail;
using lockstep::Clock;

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

// Signals arrive as bytes on this pipe, so the main loop handles them in poll() rather than in a handler.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &byte, 1);  // if full, a wake-up is already queued
  errno = saved;
}

void install_signal_handlers() {
  LOCKSTEP_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "pipe: ", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher while ranks run
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// How a wait() status reads, and the exit code the launcher passes on (128+N for signal N, as shells do).
std::string describe(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + signal_name(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}
int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

// Copies a rank's stdout or stderr pipe to ours, one "[rankR]: " prefix per line.
class LinePrefixer {
 public:
  LinePrefixer(int pipe_fd, int out_fd, std::string prefix) : fd_(pipe_fd), out_(out_fd), prefix_(std::move(prefix)) {}
  LinePrefixer(LinePrefixer&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), out_(o.out_), prefix_(std::move(o.prefix_)), line_(std::exchange(o.line_, {})) {}
  LinePrefixer& operator=(LinePrefixer&&) = delete;
  ~LinePrefixer() {
    flush();
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }

  // Forwards what the pipe holds now; closes it at end of file.
  void pump() {
    char buf[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        flush();
        ::close(fd_);
        fd_ = -1;
        return;
      }
      for (ssize_t i = 0; i < n; ++i) {
        line_ += buf[i];
        if (buf[i] == '\n' || line_.size() >= kMaxLine) emit();
      }
    }
  }

  // Emits a final line that lacks its newline.
  void flush() {
    if (line_.empty()) return;
    line_ += '\n';
    emit();
  }

 private:
  static constexpr size_t kMaxLine = 1 << 16;  // longer lines are split, so memory stays bounded
  void emit() {
    std::string out = prefix_ + line_;
    if (out.back() != '\n') out += '\n';
    // Our own stdout gone: nothing useful left to do with the text.
    lockstep::try_write_all(out_, out.data(), out.size());
    line_.clear();
  }
  int fd_;
  int out_;
  std::string prefix_;
  std::string line_;
};

struct Outcome {
  enum Kind { kSucceeded, kFailed, kInterrupted, kPortInUse } kind;
  int exit_code;
};

constexpr int kMaxPortRetries = 3;
constexpr const char* kLaunchStatusFdVar = "LOCKSTEP_LAUNCH_STATUS_FD";  // read by distributed/init.cpp

struct Rank {
  int rank;
  int local_rank;
  pid_t pid = -1;
  bool running = false;
  uint64_t signals_sent = 0;  // bit N: the launcher sent it signal N
};

// A rank that ended unsuccessfully, not by a signal the launcher sent it.
struct Failure {
  int rank;
  pid_t pid;
  int status;  // as wait() gives it
  bool while_stopping;  // found after the launcher had begun stopping the group: never the cause
  bool own_signal() const { return WIFSIGNALED(status); }
};

// One attempt at running the node's ranks, from spawn to the last exit.
class LocalGroup {
 public:
  // watch_port: the launcher chose master_port, and rank 0 may report it taken (kPortInUse).
  LocalGroup(const Options& opts, uint16_t master_port, int restart_count, bool watch_port)
      : opts_(opts), port_(master_port), restart_count_(restart_count), watch_port_(watch_port),
        cpu_blocks_(opts.cpu_bind == "none" ? std::vector<std::vector<int>>{}
                                            : lockstep::dist::split_cpus(lockstep::dist::allowed_cpus(), opts.nproc_per_node)) {}
  // Only reached with ranks still running when run() threw: kill and reap them, leaving no zombies.
  ~LocalGroup() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      ::kill(-r.pid, SIGKILL);
      ::waitpid(r.pid, nullptr, 0);
    }
    for (int fd : status_pipe_) {
      if (fd >= 0) ::close(fd);
    }
  }

  Outcome run() {
    if (watch_port_) {
      LOCKSTEP_CHECK(::pipe2(status_pipe_, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
      ::fcntl(status_pipe_[0], F_SETFL, O_NONBLOCK);
    }
    for (int i = 0; i < opts_.nproc_per_node; ++i) spawn(i);
    if (status_pipe_[1] >= 0) {
      ::close(status_pipe_[1]);  // rank 0 holds the write end now
      status_pipe_[1] = -1;
    }
    std::optional<Outcome> outcome;
    std::optional<Clock::time_point> kill_at;   // SIGKILL whoever is still running then
    std::optional<Clock::time_point> drain_at;  // stop waiting for output from leftover grandchildren
    auto stop_others = [&](int sig, int except_rank = -1) {
      send_to_running(sig, except_rank);
      if (!kill_at) kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts_.grace_period_s * 1000));
    };
    for (;;) {
      // Before reaping: rank 0 reports a taken port before it exits.
      if (read_status() && !outcome) {
        std::fprintf(stderr, "launch: rank 0 could not listen on MASTER_PORT %s (address in use); stopping the "
                     "ranks to start them again on another port\n", taken_address_.c_str());
        outcome = Outcome{Outcome::kPortInUse, 1};
        stop_others(SIGTERM, /*except_rank=*/0);  // rank 0 is failing already: let it say why
      }
      // Every rank that has ended since the last look. Ranks that die together (one killed, a peer
      // exiting because it lost that one) can both have ended by now: those that died of a signal
      // the launcher did not send come first, as the likely cause; the rest in rank order.
      std::vector<Failure> ended;
      for (Rank& r : ranks_) {
        int status = 0;
        if (!r.running || ::waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
        r.running = false;
        if (outcome && outcome->kind == Outcome::kPortInUse && r.rank == 0 && status != 0) {
          outcome->exit_code = exit_code(status);  // what the launcher exits with if it gives up
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        if (outcome && outcome->kind != Outcome::kFailed) continue;  // interrupted, or a port retry
        if (WIFSIGNALED(status) && WTERMSIG(status) < 64 && (r.signals_sent >> WTERMSIG(status) & 1)) {
          continue;  // stopped by the launcher, as asked
        }
        ended.push_back(Failure{r.rank, r.pid, status, outcome.has_value()});
      }
      std::stable_partition(ended.begin(), ended.end(), [](const Failure& f) { return f.own_signal(); });
      for (const Failure& f : ended) {
        std::fprintf(stderr, "launch: rank %d (pid %d) %s%s\n", f.rank, static_cast<int>(f.pid),
                     describe(f.status).c_str(), f.while_stopping ? " while being stopped" : "");
        failures_.push_back(f);
      }
      if (!ended.empty() && !outcome) {
        outcome = Outcome{Outcome::kFailed, 0};  // the status is the cause's, chosen at the end
        int left = static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& x) { return x.running; }));
        if (left) std::fprintf(stderr, "launch: stopping the other %d running rank(s)\n", left);
        stop_others(SIGTERM);
      }
      auto now = Clock::now();
      bool any_running = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
      if (!any_running) {
        if (!drain_at) drain_at = now + std::chrono::seconds(1);
        bool any_open = std::any_of(pumps_.begin(), pumps_.end(), [](const LinePrefixer& p) { return p.open(); });
        if (!any_open || now >= *drain_at) break;
      }
      if (kill_at && now >= *kill_at) {
        send_to_running(SIGKILL);
        kill_at = now + std::chrono::hours(1);  // once is enough; SIGKILL cannot be refused
      }

      // Sleep until a signal, output, or the next deadline; at most 1 s so a lost wake-up costs little.
      auto wake = now + std::chrono::seconds(1);
      if (kill_at) wake = std::min(wake, *kill_at);
      if (drain_at) wake = std::min(wake, *drain_at);
      std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}, {status_pipe_[0], POLLIN, 0}};
      for (const auto& p : pumps_) fds.push_back({p.fd(), POLLIN, 0});  // closed pumps have fd -1: skipped
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
      if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms, 0))) < 0 && errno != EINTR) {
        fail("poll: ", std::strerror(errno));
      }
      if (fds[0].revents & POLLIN) {
        unsigned char sigs[64];
        ssize_t n = ::read(g_signal_pipe[0], sigs, sizeof(sigs));
        for (ssize_t i = 0; i < n; ++i) {
          int sig = sigs[i];
          if (sig == SIGCHLD) continue;  // reaped at the top of the loop
          std::fprintf(stderr, "launch: got %s, passing it to the ranks\n", signal_name(sig).c_str());
          if (!outcome) outcome = Outcome{Outcome::kInterrupted, 128 + sig};
          stop_others(sig);
        }
      }
      for (size_t i = 0; i < pumps_.size(); ++i) {
        if (fds[i + 2].revents) pumps_[i].pump();
      }
    }
    if (outcome) send_to_all_groups(SIGKILL);  // grandchildren a failed rank left behind
    pumps_.clear();                            // flushes partial last lines
    if (outcome && outcome->kind == Outcome::kFailed) outcome->exit_code = exit_code(name_cause());
    return outcome.value_or(Outcome{Outcome::kSucceeded, 0});
  }

 private:
  void spawn(int local_rank) {
    Rank r{opts_.node_rank * opts_.nproc_per_node + local_rank, local_rank};
    std::vector<std::string> env = environment(r);
    std::vector<char*> envp, argv;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = opts_.command;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (r.rank == 0 && status_pipe_[1] >= 0) {
      // dup2 onto itself clears close-on-exec in the child only (POSIX; glibc >= 2.29).
      posix_spawn_file_actions_adddup2(&actions, status_pipe_[1], status_pipe_[1]);
    }
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (opts_.prefix_output) {
      LOCKSTEP_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
      posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
      posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    }
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Own process group: the launcher alone decides when ranks get a signal, and killing the group
    // also reaches processes a rank started. Undo what the launcher changed: SIGPIPE ignored, handlers.
    sigset_t defaults, empty;
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, sig);
    sigemptyset(&empty);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);

    int rc;
    {
      lockstep::dist::ScopedAffinity bound(cpu_blocks_.empty() ? std::vector<int>{} : cpu_blocks_[static_cast<size_t>(local_rank)]);
      rc = ::posix_spawnp(&r.pid, argv[0], &actions, &attr, argv.data(), envp.data());
    }
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    for (int fd : {out[1], err[1]}) {
      if (fd >= 0) ::close(fd);
    }
    if (rc != 0) {
      for (int fd : {out[0], err[0]}) {
        if (fd >= 0) ::close(fd);
      }
      fail("cannot start '", opts_.command[0], "' for rank ", r.rank, ": ", std::strerror(rc));
    }
    r.running = true;
    ranks_.push_back(r);
    if (opts_.prefix_output) {
      std::string prefix = "[rank" + std::to_string(r.rank) + "]: ";
      for (auto [fd, to] : {std::pair{out[0], STDOUT_FILENO}, std::pair{err[0], STDERR_FILENO}}) {
        ::fcntl(fd, F_SETFL, O_NONBLOCK);  // our end only: the rank's writes stay blocking
        pumps_.emplace_back(fd, to, prefix);
      }
    }
  }

  std::vector<std::string> environment(const Rank& r) const {
    std::vector<std::pair<std::string, std::string>> vars = {
        {"RANK", std::to_string(r.rank)},
        {"LOCAL_RANK", std::to_string(r.local_rank)},
        {"WORLD_SIZE", std::to_string(opts_.nnodes * opts_.nproc_per_node)},
        {"LOCAL_WORLD_SIZE", std::to_string(opts_.nproc_per_node)},
        {"GROUP_RANK", std::to_string(opts_.node_rank)},
        {"NODE_RANK", std::to_string(opts_.node_rank)},
        {"MASTER_ADDR", opts_.master_addr},
        {"MASTER_PORT", std::to_string(port_)},
        {"LOCKSTEP_RESTART_COUNT", std::to_string(restart_count_)},
    };
    // N ranks each running a full-width OpenMP pool would oversubscribe the cores N times.
    if (!lockstep::env_string("OMP_NUM_THREADS")) vars.emplace_back("OMP_NUM_THREADS", "1");
    if (!opts_.job_token.empty()) vars.emplace_back(lockstep::dist::JobToken::kEnvVar, opts_.job_token);
    if (r.rank == 0 && status_pipe_[1] >= 0) vars.emplace_back(kLaunchStatusFdVar, std::to_string(status_pipe_[1]));
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string_view entry(*e);
      std::string_view name = entry.substr(0, entry.find('='));
      bool replaced = std::any_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
      if (!replaced && name != kLaunchStatusFdVar) env.emplace_back(entry);  // never pass on an outer launch's
    }
    for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
    return env;
  }

  // Reads what rank 0 wrote to the status pipe; true once it has reported its port taken.
  bool read_status() {
    if (status_pipe_[0] < 0) return false;
    char buf[512];
    for (;;) {
      ssize_t n = ::read(status_pipe_[0], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (status_.size() < 4096) status_.append(buf, static_cast<size_t>(n));
    }
    static constexpr std::string_view kTag = "address-in-use ";
    size_t at = status_.find(kTag);
    if (at == std::string::npos) return false;
    size_t end = status_.find('\n', at);
    if (end == std::string::npos) return false;
    taken_address_ = status_.substr(at + kTag.size(), end - at - kTag.size());
    return true;
  }

  // The failure taken as the cause: the first rank that died of a signal of its own (a rank that
  // loses its peer usually exits with an error status, maybe before the launcher has seen the peer
  // die), else the first to fail. When several ranks failed, says which and why; returns its status.
  // Only the ranks found ended in the look that first saw a failure compete: one that aborts while
  // being stopped (SIGABRT from a collective's thread, a sanitizer report) is listed, never blamed.
  int name_cause() const {
    auto first_look = std::find_if(failures_.begin(), failures_.end(), [](const Failure& f) { return f.while_stopping; });
    auto cause = std::find_if(failures_.begin(), first_look, [](const Failure& f) { return f.own_signal(); });
    const bool by_signal = cause != first_look;
    if (!by_signal) cause = failures_.begin();
    if (failures_.size() > 1) {
      std::string all = "rank " + std::to_string(cause->rank) + " " + describe(cause->status);
      for (auto f = failures_.begin(); f != failures_.end(); ++f) {
        if (f != cause) all += ", rank " + std::to_string(f->rank) + " " + describe(f->status);
      }
      std::fprintf(stderr, "launch: %zu ranks failed: %s; taking rank %d (pid %d) as the cause, %s, and exiting with its status %d\n",
                   failures_.size(), all.c_str(), cause->rank, static_cast<int>(cause->pid),
                   by_signal ? "the first to die of a signal" : "the first to fail", exit_code(cause->status));
    }
    return cause->status;
  }

  void send_to_running(int sig, int except_rank = -1) {
    for (Rank& r : ranks_) {
      if (!r.running || r.rank == except_rank) continue;
      if (sig > 0 && sig < 64) r.signals_sent |= uint64_t{1} << sig;
      ::kill(-r.pid, sig);
    }
  }
  void send_to_all_groups(int sig) {
    for (const Rank& r : ranks_) ::kill(-r.pid, sig);  // ESRCH for groups already empty: harmless
  }

  const Options& opts_;
  uint16_t port_;
  int restart_count_;
  bool watch_port_;
  std::vector<std::vector<int>> cpu_blocks_;  // per local rank (cpu_binding.h); empty: ranks are not bound
  int status_pipe_[2] = {-1, -1};  // rank 0 -> launcher: "address-in-use HOST:PORT\n"
  std::string status_;
  std::string taken_address_;
  std::vector<Rank> ranks_;
  std::vector<Failure> failures_;  // in the order the launcher found them
  std::vector<LinePrefixer> pumps_;
};

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
    install_signal_handlers();
    int port_retries = 0;
    for (int restart = 0;;) {
      // A fresh port per attempt: the previous master's may still be held by a straggler.
      lockstep::dist::Socket reservation;
      uint16_t port = static_cast<uint16_t>(opts.master_port);
      if (!port) {
        reservation = reserve_port(opts.master_addr);
        port = reservation.local_port();
      }
      Outcome outcome = LocalGroup(opts, port, restart, /*watch_port=*/opts.master_port == 0).run();
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
