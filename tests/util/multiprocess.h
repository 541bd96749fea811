// Multi-process tests: run one function as W ranks, each in its own forked process, and collect how
// each ended. Ranks are processes, not threads, so every rank has its own process group, globals and
// sockets, as under the launcher.
//
//   auto results = testing::run_ranks(3, [&](int rank) {
//     ...                                  // the rank's code; throw to fail
//     RANK_CHECK(x == 3, "x is ", x);      // doctest's CHECK cannot report from a child process
//   });
//   CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
//
// A rank fails when its function throws (the message comes back to the parent), exits another way
// with a non-zero status, or is still running at the timeout (it is then killed).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "distributed/net/socket.h"
#include "common/check.h"
#include "tests/util/test_util.h"

namespace lockstep::testing {

// How many times longer a hang guard waits in this build: ThreadSanitizer runs the reductions about
// ten times slower. Only limits that catch a hang scale; the time bounds a test checks do not.
#if defined(__SANITIZE_THREAD__)
inline constexpr int kSanitizerSlowdown = 10;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr int kSanitizerSlowdown = 10;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

struct RankResult {
  int rank = 0;
  int exit_code = -1;    // the child's exit status; -1 when killed by a signal or by the timeout
  bool timed_out = false;
  std::string message;   // what the rank's exception said, or how it ended
  bool ok() const { return exit_code == 0 && !timed_out; }
};

// Ranks started by start_ranks and not yet waited for.
struct RankProcesses {
  std::vector<RankResult> results;
  std::vector<pid_t> pids;
  std::vector<int> fds;  // the read ends of the pipes that carry each rank's exception message
};

// Forks `world_size` children; child r runs fn(r) and exits 0 when it returns, 1 when it throws. Returns
// at once: the parent can act while the ranks run (from its main thread, so that it forks while it has
// no other threads: a child of a threaded process must not start threads, and ThreadSanitizer refuses
// to), then collect them with wait_ranks.
inline RankProcesses start_ranks(int world_size, const std::function<void(int rank)>& fn) {
  std::fflush(stdout);
  std::fflush(stderr);
  RankProcesses ps{std::vector<RankResult>(world_size), std::vector<pid_t>(world_size, -1),
                   std::vector<int>(world_size, -1)};
  for (int r = 0; r < world_size; ++r) {
    ps.results[r].rank = r;
    int p[2];
    LOCKSTEP_CHECK(::pipe2(p, O_CLOEXEC) == 0, "run_ranks: pipe failed");
    pid_t pid = ::fork();
    LOCKSTEP_CHECK(pid >= 0, "run_ranks: fork failed");
    if (pid == 0) {
      ::close(p[0]);
      for (int q = 0; q < r; ++q) ::close(ps.fds[q]);
      std::string message;
      int code = 0;
      try {
        fn(r);
      } catch (const std::exception& e) {
        message = e.what();
        code = 1;
      } catch (...) {
        message = "a non-std exception";
        code = 1;
      }
      for (size_t off = 0; off < message.size();) {
        ssize_t n = ::write(p[1], message.data() + off, message.size() - off);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);  // no atexit handlers or static destructors of the parent's test runner
    }
    ::close(p[1]);
    ::fcntl(p[0], F_SETFL, O_NONBLOCK);
    ps.pids[r] = pid;
    ps.fds[r] = p[0];
  }
  return ps;
}

// Waits for the ranks of start_ranks, killing those still running after `timeout` (by default 30 s,
// times kSanitizerSlowdown), and says how each ended.
inline std::vector<RankResult> wait_ranks(RankProcesses& ps, std::chrono::milliseconds timeout =
                                                                 std::chrono::seconds(30) * kSanitizerSlowdown) {
  const int world_size = static_cast<int>(ps.pids.size());
  std::vector<RankResult>& results = ps.results;
  std::vector<pid_t>& pids = ps.pids;
  std::vector<int>& fds = ps.fds;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto drain = [&](int r) {
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(fds[r], buf, sizeof(buf));
      if (n > 0) {
        results[r].message.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {  // end of file: the child is gone
        ::close(fds[r]);
        fds[r] = -1;
      }
      return;
    }
  };
  int running = world_size;
  while (running > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> ranks;
    for (int r = 0; r < world_size; ++r) {
      if (fds[r] >= 0) {
        pfds.push_back({fds[r], POLLIN, 0});
        ranks.push_back(r);
      }
    }
    ::poll(pfds.data(), pfds.size(), 5);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents) drain(ranks[i]);
    }
    for (int r = 0; r < world_size; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        pids[r] = -1;
        --running;
        if (fds[r] >= 0) drain(r);
        if (WIFEXITED(status)) {
          results[r].exit_code = WEXITSTATUS(status);
          if (results[r].exit_code != 0 && results[r].message.empty())
            results[r].message = "exited with status " + std::to_string(results[r].exit_code);
        } else if (WIFSIGNALED(status)) {
          results[r].message += " (killed by signal " + std::to_string(WTERMSIG(status)) + ")";
        }
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() >= deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (pids[r] < 0) continue;
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], nullptr, 0);
        pids[r] = -1;
        results[r].timed_out = true;
        results[r].message += "did not finish within " + lockstep::format_seconds(
                                  std::chrono::duration_cast<std::chrono::milliseconds>(timeout)) + " (killed)";
      }
      running = 0;
    }
  }
  for (int r = 0; r < world_size; ++r) {
    if (fds[r] >= 0) ::close(fds[r]);
  }
  return results;
}

// start_ranks then wait_ranks: fn as `world_size` ranks, and how each ended.
inline std::vector<RankResult> run_ranks(int world_size, const std::function<void(int rank)>& fn,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(30) *
                                                                             kSanitizerSlowdown) {
  RankProcesses ps = start_ranks(world_size, fn);
  return wait_ranks(ps, timeout);
}

inline bool all_ok(const std::vector<RankResult>& results) {
  for (const auto& r : results) {
    if (!r.ok()) return false;
  }
  return true;
}

// One line per failed rank ("" when all succeeded), for CHECK_MESSAGE.
inline std::string failures(const std::vector<RankResult>& results) {
  std::string s;
  for (const auto& r : results) {
    if (!r.ok()) s += "\n  rank " + std::to_string(r.rank) + ": " + r.message;
  }
  return s;
}

// A TCP port on 127.0.0.1 that was free a moment ago (bound, then released).
inline uint16_t free_port() { return dist::Socket::listen("127.0.0.1", 0).local_port(); }

}  // namespace lockstep::testing
