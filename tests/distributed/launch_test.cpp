// launch tests: runs the real launcher binary on tests/distributed/launch_child and checks the ranks' environment,
// failure propagation (exit status, naming the rank, stopping the others), signals and restarts.
// The binaries' paths come as arguments: args = [$(rootpath launch), $(rootpath launch_child),
// $(rootpath rendezvous_child)]. rendezvous_child runs init_process_group for the MASTER_PORT cases.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/launch/cpu_binding.h"
#include "distributed/net/socket.h"
#include "tests/util/test_util.h"

extern char** environ;

namespace {
using lockstep::testing::contains;

using Clock = std::chrono::steady_clock;

// doctest's main() owns argv, so read ours from /proc.
std::vector<std::string> own_args() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(f, arg, '\0')) args.push_back(arg);
  return args;
}

const std::string& launch_path() {
  static const std::string path = own_args().at(1);
  return path;
}
const std::string& child_path() {
  static const std::string path = own_args().at(2);
  return path;
}
const std::string& rendezvous_child_path() {
  static const std::string path = own_args().at(3);
  return path;
}


std::string temp_file(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base ? base : "/tmp") + "/launch_test." + std::to_string(::getpid()) + "." + name;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}


// A fresh scratch directory for rendezvous_child.
std::string scratch_dir(const std::string& name) {
  std::string dir = temp_file(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// "R ok port=P" lines of rendezvous_child: rank -> port.
std::map<int, std::string> ok_ports(const std::string& out) {
  std::map<int, std::string> ports;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto at = line.find(" ok port=");
    if (at != std::string::npos) ports[std::stoi(line.substr(0, at))] = line.substr(at + 9);
  }
  return ports;
}

struct Result {
  int exit_code = -1;  // the launcher's exit status; -1 if it did not exit normally
  std::string out, err;
  double seconds = 0;
};

// Runs `launch args...` with stdout/stderr captured in files. `while_running(pid, out_path)` is
// called until it returns true (for sending signals). The launcher is SIGKILLed after 30 s.
Result run_launch(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {},
                  const std::function<bool(pid_t, const std::string&)>& while_running = nullptr) {
  static int runs = 0;
  std::string out_path = temp_file("out" + std::to_string(runs)), err_path = temp_file("err" + std::to_string(runs));
  ++runs;
  std::vector<std::string> argv_s = {launch_path()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  auto start = Clock::now();
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);

  Result res;
  int status = 0;
  bool signalled = !while_running;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (!signalled) signalled = while_running(pid, out_path);
    if (Clock::now() - start > std::chrono::seconds(30)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("launch did not exit within 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  res.out = read_file(out_path);
  res.err = read_file(err_path);
  return res;
}

// launch_child prints "R KEY=value" lines: rank -> key -> value.
std::map<int, std::map<std::string, std::string>> parse_ranks(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> ranks;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto space = line.find(' '), eq = line.find('=');
    if (space == std::string::npos || eq == std::string::npos || eq < space) continue;
    ranks[std::stoi(line.substr(0, space))][line.substr(space + 1, eq - space - 1)] = line.substr(eq + 1);
  }
  return ranks;
}

// Every rank's process is gone (reaped by the launcher, not left running as an orphan).
void check_all_gone(const std::map<int, std::map<std::string, std::string>>& ranks) {
  for (const auto& [rank, vars] : ranks) {
    pid_t pid = std::stoi(vars.at("PID"));
    CHECK_MESSAGE(::kill(pid, 0) != 0, "rank ", rank, " (pid ", pid, ") is still running");
  }
}

}  // namespace

TEST_CASE("launch sets each rank's environment on one node") {
  std::set<std::string> tokens;  // one per launch
  for (int n : {1, 2, 3}) {
    CAPTURE(n);
    // Both flag spellings; everything after the program goes to it untouched, launcher-like flags too.
    std::vector<std::string> args = n == 2 ? std::vector<std::string>{"--nproc_per_node=2"}
                                           : std::vector<std::string>{"--nproc_per_node", std::to_string(n)};
    for (std::string a : {child_path(), std::string("env"), std::string("a b"), std::string("--nproc_per_node=9")}) {
      args.push_back(a);
    }
    Result res = run_launch(args);
    CHECK(res.exit_code == 0);
    CHECK(res.err == "");
    auto ranks = parse_ranks(res.out);
    REQUIRE(ranks.size() == static_cast<size_t>(n));
    std::string port = ranks[0]["MASTER_PORT"];
    CHECK(std::stoi(port) > 0);
    CHECK(std::stoi(port) < 65536);
    for (int r = 0; r < n; ++r) {
      auto& v = ranks[r];
      CHECK(v["RANK"] == std::to_string(r));
      CHECK(v["LOCAL_RANK"] == std::to_string(r));
      CHECK(v["WORLD_SIZE"] == std::to_string(n));
      CHECK(v["LOCAL_WORLD_SIZE"] == std::to_string(n));
      CHECK(v["GROUP_RANK"] == "0");
      CHECK(v["NODE_RANK"] == "0");
      CHECK(v["MASTER_ADDR"] == "127.0.0.1");
      CHECK(v["MASTER_PORT"] == port);
      CHECK(v["OMP_NUM_THREADS"] == "1");
      CHECK(v["LOCKSTEP_RESTART_COUNT"] == "0");
      CHECK(v["ARGS"] == "a b --nproc_per_node=9");
      // The job token: 64 hex digits (32 random bytes), the same for every rank of the launch.
      CHECK(v["LOCKSTEP_JOB_TOKEN"].size() == 64);
      CHECK(v["LOCKSTEP_JOB_TOKEN"].find_first_not_of("0123456789abcdef") == std::string::npos);
      CHECK(v["LOCKSTEP_JOB_TOKEN"] == ranks[0]["LOCKSTEP_JOB_TOKEN"]);
      CHECK(v["LOCKSTEP_JOB_TOKEN_FILE"] == "<unset>");
    }
    tokens.insert(ranks[0]["LOCKSTEP_JOB_TOKEN"]);
  }
  CHECK(tokens.size() == 3);  // fresh for each launch
}

// "2,3": the CPUs as launch_child prints them.
std::string cpu_list(const std::vector<lockstep::dist::CpuPlace>& cpus) {
  std::string list;
  for (const auto& p : cpus) {
    if (!list.empty()) list += ',';
    list += std::to_string(p.cpu);
  }
  return list;
}

std::set<int> parse_cpus(const std::string& list) {
  std::set<int> cpus;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) cpus.insert(std::stoi(item));
  return cpus;
}

TEST_CASE("split_cpus gives each rank whole cores, in package order, however the CPUs are numbered") {
  using lockstep::dist::CpuPlace;
  using lockstep::dist::split_cpus;
  using Blocks = std::vector<std::vector<int>>;
  // Two packages of two cores of two hardware threads, numbered as Linux does: CPUs 0-3 are the first
  // thread of each core, 4-7 their siblings.
  std::vector<CpuPlace> smt;
  for (int c = 0; c < 8; ++c) smt.push_back({c, (c % 4) / 2, c % 2});
  CHECK(split_cpus(smt, 4) == Blocks{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(split_cpus(smt, 2) == Blocks{{0, 4, 1, 5}, {2, 6, 3, 7}});
  CHECK(split_cpus(smt, 3) == Blocks{{0, 4}, {1, 5, 2}, {6, 3, 7}});  // 8 / 3: sizes 2, 3, 3
  CHECK(split_cpus(smt, 8) == Blocks{{0}, {4}, {1}, {5}, {2}, {6}, {3}, {7}});
  CHECK(split_cpus(smt, 1) == Blocks{{0, 4, 1, 5, 2, 6, 3, 7}});
  CHECK(split_cpus(smt, 9).empty());  // more ranks than CPUs: not bound
  CHECK(split_cpus(smt, 0).empty());
  // Without topology (sysfs unreadable) the CPUs' own numbers order them.
  std::vector<CpuPlace> unknown = {{7}, {3}, {5}, {1}, {9}};
  CHECK(split_cpus(unknown, 3) == Blocks{{1}, {3, 5}, {7, 9}});
}

TEST_CASE("launch binds each rank to its own block of CPUs when there are enough, and not otherwise") {
  // The CPUs this process may run on (the launcher it starts inherits them), and their cores.
  const std::vector<lockstep::dist::CpuPlace> cpus = lockstep::dist::allowed_cpus();
  REQUIRE(!cpus.empty());
  const size_t count = cpus.size();
  const std::string all = cpu_list(cpus);
  std::map<int, std::pair<int, int>> core_of;  // CPU -> (package, core); (-1, cpu) where sysfs does not say
  std::map<std::pair<int, int>, int> threads_per_core;
  for (const auto& p : cpus) {
    core_of[p.cpu] = p.package < 0 || p.core < 0 ? std::pair{-1, p.cpu} : std::pair{p.package, p.core};
    ++threads_per_core[core_of[p.cpu]];
  }
  const bool even_cores = std::all_of(threads_per_core.begin(), threads_per_core.end(),
                                      [&](const auto& kv) { return kv.second == threads_per_core.begin()->second; });
  for (size_t n : {size_t(1), size_t(2), size_t(3), count, count + 1}) {
    CAPTURE(n);
    Result res = run_launch({"--nproc_per_node", std::to_string(n), child_path(), "env"});
    REQUIRE(res.exit_code == 0);
    auto ranks = parse_ranks(res.out);
    REQUIRE(ranks.size() == n);
    if (n > count) {  // more ranks than CPUs: none is bound
      for (size_t r = 0; r < n; ++r) CHECK(ranks[int(r)]["CPUS"] == all);
      continue;
    }
    // Blocks of count / n CPUs (one more for some), disjoint, covering every CPU; whole cores per
    // rank when the cores split evenly.
    std::set<int> covered;
    std::map<std::pair<int, int>, std::set<size_t>> ranks_on_core;
    for (size_t r = 0; r < n; ++r) {
      CAPTURE(r);
      std::set<int> mine = parse_cpus(ranks[int(r)]["CPUS"]);
      CHECK(mine.size() >= count / n);
      CHECK(mine.size() <= (count + n - 1) / n);
      for (int c : mine) {
        CHECK(covered.insert(c).second);  // in no other rank's block
        REQUIRE(core_of.count(c) == 1);  // one of the launcher's CPUs
        ranks_on_core[core_of[c]].insert(r);
      }
    }
    CHECK(covered == parse_cpus(all));
    if (even_cores && threads_per_core.size() % n == 0) {
      for (const auto& [core, on] : ranks_on_core) {
        CHECK_MESSAGE(on.size() == 1, "core ", core.first, ":", core.second, " is split between ranks");
      }
    }
  }
  // --cpu-bind none: every rank may run on every CPU the launcher may.
  Result res = run_launch({"--cpu-bind", "none", "--nproc_per_node", "2", child_path(), "env"});
  REQUIRE(res.exit_code == 0);
  auto ranks = parse_ranks(res.out);
  REQUIRE(ranks.size() == 2);
  for (int r = 0; r < 2; ++r) CHECK(ranks[r]["CPUS"] == all);

  // A launcher confined to one CPU (as under taskset) splits only that: 2 ranks there are not bound
  // (one CPU is fewer than two ranks), and the launcher's own mask is what they inherit.
  const int last = cpus.back().cpu;
  {
    lockstep::dist::ScopedAffinity confined({last});
    res = run_launch({"--nproc_per_node", "2", child_path(), "env"});
  }
  REQUIRE(res.exit_code == 0);
  ranks = parse_ranks(res.out);
  REQUIRE(ranks.size() == 2);
  for (int r = 0; r < 2; ++r) CHECK(ranks[r]["CPUS"] == std::to_string(last));
  CHECK(cpu_list(lockstep::dist::allowed_cpus()) == all);  // the test's own mask is back

  // Bad CPUs are named, and leave the mask as it was.
  CHECK_THROWS_WITH(lockstep::dist::ScopedAffinity({-1}), doctest::Contains("CPU -1 is outside"));
  CHECK_THROWS_WITH(lockstep::dist::ScopedAffinity({CPU_SETSIZE - 1}), doctest::Contains("cannot run on CPUs"));
  CHECK(cpu_list(lockstep::dist::allowed_cpus()) == all);

  res = run_launch({"--cpu-bind", "cores", child_path(), "env"});
  CHECK(res.exit_code == 2);
  CHECK(contains(res.err, "--cpu-bind"));
}

TEST_CASE("launch: a job token the user set is passed on; a token file others may read is refused") {
  const std::string mine = "my-own-job-token-0123456789";
  Result res = run_launch({"--nproc_per_node", "2", child_path(), "env"}, {"LOCKSTEP_JOB_TOKEN=" + mine});
  CHECK(res.exit_code == 0);
  auto ranks = parse_ranks(res.out);
  REQUIRE(ranks.size() == 2);
  for (auto& [rank, v] : ranks) CHECK(v["LOCKSTEP_JOB_TOKEN"] == mine);

  const std::string file = temp_file("token");
  { std::ofstream(file) << mine << "\n"; }
  REQUIRE(::chmod(file.c_str(), 0600) == 0);
  res = run_launch({"--nproc_per_node", "2", child_path(), "env"}, {"LOCKSTEP_JOB_TOKEN_FILE=" + file});
  CHECK(res.exit_code == 0);
  ranks = parse_ranks(res.out);
  REQUIRE(ranks.size() == 2);
  for (auto& [rank, v] : ranks) {
    CHECK(v["LOCKSTEP_JOB_TOKEN_FILE"] == file);  // each rank reads the file itself
    CHECK(v["LOCKSTEP_JOB_TOKEN"] == "<unset>");
  }

  REQUIRE(::chmod(file.c_str(), 0644) == 0);
  res = run_launch({"--nproc_per_node", "2", child_path(), "env"}, {"LOCKSTEP_JOB_TOKEN_FILE=" + file});
  CHECK(res.exit_code == 1);
  CHECK(res.out == "");  // no rank started
  CHECK(res.err == "launch: job token: refused " + file +
                       ": it has mode 0644, so its group or other users may read it; run chmod 600 " + file + "\n");

  res = run_launch({"--nproc_per_node", "2", child_path(), "env"}, {"LOCKSTEP_JOB_TOKEN=short"});
  CHECK(res.exit_code == 1);
  CHECK(res.err.find("launch: job token: LOCKSTEP_JOB_TOKEN has 5 characters") == 0);
}

TEST_CASE("launch: second node of two") {
  Result res = run_launch({"--nnodes", "2", "--node_rank=1", "--nproc_per_node", "2", "--master_addr", "10.1.2.3",
                           "--master_port", "29555", child_path(), "env"},
                          {"OMP_NUM_THREADS=7", "RANK=99"});
  CHECK(res.exit_code == 0);
  auto ranks = parse_ranks(res.out);
  REQUIRE(ranks.size() == 2);
  for (int local = 0; local < 2; ++local) {
    auto& v = ranks[2 + local];
    CHECK(v["RANK"] == std::to_string(2 + local));  // the launcher's RANK=99 is replaced
    CHECK(v["LOCAL_RANK"] == std::to_string(local));
    CHECK(v["WORLD_SIZE"] == "4");
    CHECK(v["LOCAL_WORLD_SIZE"] == "2");
    CHECK(v["GROUP_RANK"] == "1");
    CHECK(v["NODE_RANK"] == "1");
    CHECK(v["MASTER_ADDR"] == "10.1.2.3");
    CHECK(v["MASTER_PORT"] == "29555");
    CHECK(v["OMP_NUM_THREADS"] == "7");  // kept when already set
    CHECK(v["LOCKSTEP_JOB_TOKEN"] == "<unset>");  // one launcher per node cannot agree on a fresh one
  }
  CHECK(res.err.find("launch: --nnodes 2 and neither LOCKSTEP_JOB_TOKEN nor LOCKSTEP_JOB_TOKEN_FILE is set: the job "
                     "runs without a job token") == 0);
}

TEST_CASE("launch: a failing rank stops the others and sets the exit status") {
  Result res = run_launch({"--nproc_per_node", "3", child_path(), "fail", "1", "3"});
  CHECK(res.exit_code == 3);
  CHECK(res.seconds < 10);  // the other ranks sleep 60 s: they were stopped, not waited for
  auto ranks = parse_ranks(res.out);  // a slow rank may have been stopped before it printed anything
  REQUIRE(ranks.count(1));
  CHECK(contains(res.err, "launch: rank 1 (pid " + ranks[1]["PID"] + ") exited with status 3\n"));
  CHECK(contains(res.err, "stopping the other 2 running rank(s)"));
  check_all_gone(ranks);
}

TEST_CASE("launch: a rank killed by SIGKILL") {
  Result res = run_launch({"--nproc_per_node", "2", child_path(), "kill", "0"});
  CHECK(res.exit_code == 128 + SIGKILL);
  CHECK(res.seconds < 10);
  auto ranks = parse_ranks(res.out);
  REQUIRE(ranks.count(0));
  CHECK(contains(res.err, "launch: rank 0 (pid " + ranks[0]["PID"] + ") killed by signal SIGKILL\n"));
  check_all_gone(ranks);
}

TEST_CASE("launch: a rank killed by a signal is named as the cause, not the survivor that exited first") {
  // Rank 1 is SIGKILLed and rank 0 exits 1 (as a rank that lost its peer does), both before the
  // launcher looks: it names both, takes the killed rank as the cause, and exits 128 + SIGKILL.
  const std::string dir = scratch_dir("survivor_first");
  Result res = run_launch({"--nproc_per_node", "2", child_path(), "survivor_first", dir});
  auto ranks = parse_ranks(res.out);
  REQUIRE(ranks.count(0));
  REQUIRE(ranks.count(1));
  const std::string killed = "launch: rank 1 (pid " + ranks[1]["PID"] + ") killed by signal SIGKILL\n";
  const std::string survivor = "launch: rank 0 (pid " + ranks[0]["PID"] + ") exited with status 1\n";
  INFO("launch's stderr:\n", res.err);
  CHECK(res.exit_code == 128 + SIGKILL);
  REQUIRE(contains(res.err, killed));
  REQUIRE(contains(res.err, survivor));
  CHECK(res.err.find(killed) < res.err.find(survivor));  // the cause first
  CHECK(contains(res.err, "launch: 2 ranks failed: rank 1 killed by signal SIGKILL, rank 0 exited with status 1; "
                          "taking rank 1 (pid " + ranks[1]["PID"] + ") as the cause, the first to die of a signal, "
                          "and exiting with its status 137\n"));
  check_all_gone(ranks);
  std::filesystem::remove_all(dir);
}

TEST_CASE("launch: a rank that aborts while being stopped is listed but not taken as the cause") {
  // Rank 1 exits 3; rank 0 dies of SIGABRT when the launcher's SIGTERM reaches it. The cause stays
  // rank 1, and the launcher exits 3, not 128 + SIGABRT.
  Result res = run_launch({"--nproc_per_node", "2", child_path(), "abort_on_term", "1", "3"});
  auto ranks = parse_ranks(res.out);
  REQUIRE(ranks.count(0));
  REQUIRE(ranks.count(1));
  INFO("launch's stderr:\n", res.err);
  CHECK(res.exit_code == 3);
  CHECK(contains(res.err, "launch: rank 0 (pid " + ranks[0]["PID"] + ") killed by signal SIGABRT while being stopped\n"));
  CHECK(contains(res.err, "taking rank 1 (pid " + ranks[1]["PID"] + ") as the cause, the first to fail, and exiting "
                          "with its status 3\n"));
  check_all_gone(ranks);
}

TEST_CASE("launch: ranks that ignore SIGTERM are killed after the grace period") {
  Result res = run_launch({"--nproc_per_node", "3", "--grace_period", "0.5", child_path(), "ignore_term", "0"});
  CHECK(res.exit_code == 2);
  CHECK(res.seconds >= 0.5);
  CHECK(res.seconds < 10);
  check_all_gone(parse_ranks(res.out));
}

TEST_CASE("launch: --max_restarts restarts the group after a failure") {
  Result res = run_launch({"--nproc_per_node", "2", "--max_restarts", "1", child_path(), "flaky"});
  CHECK(res.exit_code == 0);
  CHECK(contains(res.err, ") exited with status 4\n"));
  CHECK(contains(res.err, "launch: restarting all 2 local rank(s) (restart 1 of 1)\n"));
  CHECK(contains(res.out, "0 ok restart=1\n"));
  CHECK(contains(res.out, "1 ok restart=1\n"));

  // A rank that always fails: one restart, then the failure's status.
  res = run_launch({"--nproc_per_node", "2", "--max_restarts=1", child_path(), "fail", "0", "5"});
  CHECK(res.exit_code == 5);
  CHECK(contains(res.err, "(restart 1 of 1)"));
  CHECK_FALSE(contains(res.err, "restart 2"));
  CHECK(res.seconds < 10);
}

TEST_CASE("launch: --prefix-output labels each line with its rank") {
  Result res = run_launch({"--nproc_per_node", "2", "--prefix-output", child_path(), "echo"});
  CHECK(res.exit_code == 0);
  CHECK(contains(res.out, "[rank0]: hello from 0\n"));
  CHECK(contains(res.out, "[rank1]: hello from 1\n"));
  CHECK(contains(res.err, "[rank0]: to stderr 0\n"));  // the newline-less last line is completed
  CHECK(contains(res.err, "[rank1]: to stderr 1\n"));
  CHECK_FALSE(contains(res.out, "to stderr"));
}

TEST_CASE("launch: SIGTERM to the launcher reaches the ranks") {
  Result res = run_launch({"--nproc_per_node", "2", child_path(), "sleep"}, {}, [](pid_t pid, const std::string& out) {
    if (parse_ranks(read_file(out)).size() < 2) return false;  // wait until both ranks are up
    ::kill(pid, SIGTERM);
    return true;
  });
  CHECK(res.exit_code == 128 + SIGTERM);
  CHECK(res.seconds < 10);
  CHECK(contains(res.err, "launch: got SIGTERM, passing it to the ranks"));
  check_all_gone(parse_ranks(res.out));
}

TEST_CASE("launch: bad command lines") {
  Result res = run_launch({"--nproc_per_node", "2"});
  CHECK(res.exit_code == 1);
  CHECK(contains(res.err, "launch: no program given"));

  res = run_launch({"--nproc_per_node", "0", child_path()});
  CHECK(res.exit_code == 2);
  CHECK(contains(res.err, "--nproc_per_node"));

  res = run_launch({"--nnodes", "2", child_path(), "env"});
  CHECK(res.exit_code == 1);
  CHECK(contains(res.err, "--nnodes 2 needs --master_port"));

  res = run_launch({"--nproc_per_node", "2", "./no/such/program"});
  CHECK(res.exit_code == 127);
  CHECK(contains(res.err, "launch: cannot start './no/such/program' for rank 0: No such file or directory"));
}

TEST_CASE("launch: the MASTER_PORT it picks stays reserved, and rank 0 can still listen on it") {
  std::string dir = scratch_dir("reserved");
  Result res = run_launch({"--nproc_per_node", "2", rendezvous_child_path(), "init", dir});
  CHECK(res.exit_code == 0);
  CHECK(contains(res.out, "0 reserved=yes\n"));  // a plain bind to the port fails while the job runs
  auto ports = ok_ports(res.out);
  CHECK(ports.size() == 2);
  CHECK(ports[0] == ports[1]);
}

TEST_CASE("launch: a picked MASTER_PORT that rank 0 finds taken is replaced by another") {
  std::string dir = scratch_dir("steal_first");
  Result res = run_launch({"--nproc_per_node", "2", rendezvous_child_path(), "steal_first", dir});
  INFO("stderr: ", res.err);
  CHECK(res.exit_code == 0);
  std::string first;
  std::ifstream(dir + "/first_port") >> first;
  REQUIRE_FALSE(first.empty());
  const std::string addr = "127.0.0.1:" + first;
  CHECK(contains(res.err, "rank 0: init_process_group: rank 0 could not host the store on " + addr));
  CHECK(contains(res.err, "Address already in use"));
  CHECK(contains(res.err, "launch: rank 0 could not listen on MASTER_PORT " + addr +
                              " (address in use); stopping the ranks to start them again on another port\n"));
  CHECK(contains(res.err, "launch: starting the ranks again on another port (port retry 1 of 3)\n"));
  CHECK_FALSE(contains(res.err, "restarting"));  // not a --max_restarts restart
  auto ports = ok_ports(res.out);
  REQUIRE(ports.size() == 2);
  CHECK(ports[0] == ports[1]);
  CHECK(ports[0] != first);
  CHECK(res.seconds < 15);
}

TEST_CASE("launch: gives up when every port it picks is taken") {
  std::string dir = scratch_dir("steal_always");
  Result res = run_launch({"--nproc_per_node", "2", rendezvous_child_path(), "steal_always", dir});
  CHECK(res.exit_code == 1);  // rank 0's status
  CHECK(contains(res.err, "(port retry 3 of 3)\n"));
  CHECK(contains(res.err, "launch: giving up: rank 0 found 4 ports in a row taken\n"));
  CHECK(ok_ports(res.out).empty());
  CHECK(res.seconds < 20);
}

TEST_CASE("launch: a --master_port that is taken fails at once, naming the address, without retrying") {
  lockstep::dist::Socket taken = lockstep::dist::Socket::listen("127.0.0.1", 0);
  const std::string port = std::to_string(taken.local_port());
  std::string dir = scratch_dir("given_port");
  Result res = run_launch({"--nproc_per_node", "2", "--master_port", port, rendezvous_child_path(), "init", dir});
  INFO("stderr: ", res.err);
  CHECK(res.exit_code == 1);
  CHECK(contains(res.err, "rank 0: init_process_group: rank 0 could not host the store on 127.0.0.1:" + port +
                              " (is another job using the port?)"));
  CHECK(contains(res.err, "launch: rank 0 (pid "));
  CHECK_FALSE(contains(res.err, "another port"));
  CHECK(res.seconds < 10);
}
