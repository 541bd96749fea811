// launch_child: the rank program of launch_test. Prints its environment or misbehaves on request:
//   env ARGS...          print "R KEY=value" for each launcher variable, then "R ARGS=..." and
//                        "R CPUS=0,1" (the CPUs it may run on)
//   fail R CODE          rank R exits with CODE after 100 ms; the others sleep 60 s
//   kill R               rank R kills itself with SIGKILL after 100 ms; the others sleep 60 s
//   survivor_first DIR   rank 1 is SIGKILLed, and rank 0 then exits 1 as a rank that lost its peer
//                        would, both while the launcher is held stopped (SIGSTOP; a helper process
//                        sends SIGCONT once rank 0 is gone), so the launcher finds both ended at once
//   flaky                rank 1 exits 4 unless LOCKSTEP_RESTART_COUNT > 0; then every rank prints "R ok"
//   ignore_term R        rank R exits 2 after 200 ms; the others ignore SIGTERM and sleep 60 s
//   echo                 a line on stdout and one on stderr (the last without a newline)
//   sleep                sleep 60 s
// Every rank first prints "R PID=pid" so the test can check the launcher left nothing running.
#include <sched.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

// One write() per line: lines of different ranks sharing a pipe or file then never interleave.
void say(int fd, const std::string& line) {
  if (::write(fd, line.data(), line.size()) < 0) std::_Exit(99);
}

// The CPUs this process may run on, as "0,1,5".
std::string cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return "<error>";
  std::string list;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    if (!list.empty()) list += ',';
    list += std::to_string(c);
  }
  return list;
}

[[noreturn]] void sleep_then_exit() {
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::_Exit(0);
}

// Polls `done` every millisecond for up to 10 s; exits 98 if it never holds.
template <typename F>
void wait_for(F done) {
  for (int i = 0; i < 10000; ++i) {
    if (done()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::_Exit(98);
}

// Rank 0 of survivor_first: rank 1 dies of SIGKILL, then rank 0 exits 1, while the launcher is stopped.
[[noreturn]] void survivor_first(const std::string& dir) {
  pid_t peer = 0;
  wait_for([&] { return bool(std::ifstream(dir + "/rank1.pid") >> peer); });
  const pid_t launcher = ::getppid(), self = ::getpid();
  ::kill(launcher, SIGSTOP);
  ::kill(peer, SIGKILL);
  wait_for([&] {  // a zombie: dead, and not reaped (the launcher is stopped)
    std::ifstream stat("/proc/" + std::to_string(peer) + "/stat");
    std::string pid, comm, state;
    return stat >> pid >> comm >> state && state == "Z";
  });
  if (::fork() == 0) {  // the helper: wakes the launcher once rank 0 has exited
    wait_for([&] { return ::getppid() != self; });
    ::kill(launcher, SIGCONT);
    std::_Exit(0);
  }
  std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  int rank = std::atoi(env("RANK").c_str());
  std::string r = std::to_string(rank) + " ";
  say(1, r + "PID=" + std::to_string(::getpid()) + "\n");

  if (mode == "env") {
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                             "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "LOCKSTEP_RESTART_COUNT",
                             "LOCKSTEP_JOB_TOKEN", "LOCKSTEP_JOB_TOKEN_FILE"}) {
      say(1, r + name + "=" + env(name) + "\n");
    }
    std::string args;
    for (int i = 2; i < argc; ++i) {
      if (i > 2) args += ' ';
      args += argv[i];
    }
    say(1, r + "ARGS=" + args + "\n");
    say(1, r + "CPUS=" + cpus() + "\n");
    return 0;
  }
  if (mode == "fail" && argc == 4) {
    if (rank != std::atoi(argv[2])) sleep_then_exit();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return std::atoi(argv[3]);
  }
  if (mode == "kill" && argc == 3) {
    if (rank != std::atoi(argv[2])) sleep_then_exit();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::raise(SIGKILL);
  }
  if (mode == "survivor_first" && argc == 3) {
    if (rank == 0) survivor_first(argv[2]);
    const std::string path = std::string(argv[2]) + "/rank1.pid";
    std::ofstream(path + ".tmp") << ::getpid() << "\n";
    std::rename((path + ".tmp").c_str(), path.c_str());
    sleep_then_exit();
  }
  if (mode == "abort_on_term" && argc == 4) {  // the others die of SIGABRT when the launcher stops them
    if (rank == std::atoi(argv[2])) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return std::atoi(argv[3]);
    }
    std::signal(SIGTERM, [](int) { std::abort(); });
    sleep_then_exit();
  }
  if (mode == "flaky") {
    if (rank == 1 && env("LOCKSTEP_RESTART_COUNT") == "0") return 4;
    say(1, r + "ok restart=" + env("LOCKSTEP_RESTART_COUNT") + "\n");
    return 0;
  }
  if (mode == "ignore_term" && argc == 3) {
    if (rank == std::atoi(argv[2])) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return 2;
    }
    std::signal(SIGTERM, SIG_IGN);
    sleep_then_exit();
  }
  if (mode == "echo") {
    say(1, "hello from " + std::to_string(rank) + "\n");
    say(2, "to stderr " + std::to_string(rank));
    return 0;
  }
  if (mode == "sleep") sleep_then_exit();
  say(2, "launch_child: bad arguments\n");
  return 64;
}
