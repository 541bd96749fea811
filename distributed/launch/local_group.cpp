// The launcher's local group (local_group.h): spawns the node's ranks with their environment and CPU
// blocks, forwards their output, and when one fails stops the others and names the cause.
//
// CPU binding (--cpu-bind, default auto): when the node's ranks are no more than the CPUs the launcher
// may run on, rank i is bound to the i-th of nproc_per_node equal blocks of those CPUs, taken in the
// order of their package and core (whole cores per rank where the count allows), as Open MPI binds
// by default. Left to the scheduler, two ranks on a 2-core machine sometimes share one
// core for a whole run: their shared-memory collectives then hand over by yielding (5.7 us per 4-byte
// all-reduce instead of 0.6-1.0, measured) and their compute halves. A rank inherits its mask from the
// launcher, which takes each block itself just around the rank's spawn, so no thread of the rank ever
// runs unbound. With more ranks than CPUs, or --cpu-bind none, ranks run where the launcher may.
#include "distributed/launch/local_group.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distributed/launch/cpu_binding.h"
#include "distributed/launch/line_prefixer.h"
#include "distributed/net/job_token.h"
#include "common/check.h"
#include "common/deadline.h"
#include "common/env.h"

extern char** environ;

namespace lockstep::dist::launch {
namespace {

// Signals arrive as bytes on this pipe, so the main loop handles them in poll() rather than in a handler.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &byte, 1);  // if full, a wake-up is already queued
  errno = saved;
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

}  // namespace

void install_signal_handlers() {
  LOCKSTEP_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "pipe: ", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher while ranks run
}

Outcome run_local_group(const Options& opts, uint16_t master_port, int restart_count, bool watch_port) {
  return LocalGroup(opts, master_port, restart_count, watch_port).run();
}

}  // namespace lockstep::dist::launch
