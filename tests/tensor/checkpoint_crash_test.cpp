// Bad files: a checkpoint writer killed at a random moment never leaves a broken checkpoint behind
// (save_safetensors writes a temporary file and renames it over the old one), the temporary files of
// killed writers are removed by the next save, and a checkpoint cut short at any byte is a clear
// error, never a crash or a silently short tensor.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/parallel.h"
#include "tensor/safetensors.h"
#include "tests/util/test_util.h"

namespace {

using namespace lockstep;
namespace fs = std::filesystem;

// A fresh directory per test case (tests/util/test_util.h).
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("lockstep_ckpt") {}
};

constexpr int64_t kElements = 1 << 20;  // 4 MiB of float32 per checkpoint

// Checkpoint version v: "w" holds v everywhere, "v" holds {v, -v}, the metadata says v. Versions stay
// below 2^24 so that float32 holds them exactly.
void save_version(const std::string& path, int64_t v) {
  save_safetensors(path, {{"w", full({kElements}, static_cast<double>(v))}, {"v", tensor(std::vector<int64_t>{v, -v})}},
                   {{"version", std::to_string(v)}});
}

// Loads `path` and checks that it is one complete version; returns it.
int64_t load_version(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == 2);
  const int64_t v = std::stoll(f.metadata.at("version"));
  REQUIRE(f.tensors[1].first == "v");
  REQUIRE(f.tensors[1].second.to_vector<int64_t>() == std::vector<int64_t>{v, -v});
  REQUIRE(f.tensors[0].first == "w");
  const Tensor& w = f.tensors[0].second;
  REQUIRE(w.numel() == kElements);
  const float* p = w.data<float>();
  for (int64_t i = 0; i < kElements; ++i) {
    if (p[i] != static_cast<float>(v)) FAIL("version ", v, ": element ", i, " is ", p[i]);
  }
  return v;
}

int count_temporaries(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

// The pid of a process that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

void touch(const std::string& path) { std::ofstream(path) << "partial"; }

// This host's name as save_safetensors puts it in temporary file names (characters other than
// letters, digits, '-', '_' and '.' become '_').
std::string host_tag() {
  char buf[256] = {};
  REQUIRE(::gethostname(buf, sizeof(buf) - 1) == 0);
  std::string s(buf);
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return s.empty() ? "unknown-host" : s;
}

// The temporary file that process `pid` of this host writes while saving `path`.
std::string temporary(const std::string& path, const std::string& pid) { return path + ".tmp." + host_tag() + "." + pid; }
std::string temporary(const std::string& path, pid_t pid) { return temporary(path, std::to_string(pid)); }

}  // namespace

TEST_CASE("a writer SIGKILLed at random moments while saving always leaves a complete checkpoint") {
  TempDir dir;
  const std::string path = dir.path + "/ckpt.safetensors";
  save_version(path, 0);
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> pause_us(0, 80000);
  constexpr int kRounds = 25;
  int64_t last = 0;
  int advanced = 0, kills_mid_write = 0;
  for (int round = 1; round <= kRounds; ++round) {
    // The child saves versions base, base + 1, ... to the same path until it is killed.
    const int64_t base = round * 100000;
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The parent may have intra-op pool threads (its fills run on them); a child forked from a
      // threaded process should not start threads of its own (ThreadSanitizer refuses to), so the
      // child computes on its one thread.
      set_num_threads(1);
      try {
        for (int64_t v = base;; ++v) save_version(path, v);
      } catch (...) {
        ::_exit(1);  // never back into the test runner
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    kills_mid_write += fs::exists(temporary(path, pid));
    const int64_t v = load_version(path);
    INFO("round ", round, ": the checkpoint holds version ", v, ", the previous round left ", last);
    CHECK((v == last || (v >= base && v < base + 100000)));
    advanced += v != last;
    last = v;
  }
  // The test proves something only if writes completed and kills landed in the middle of writes: a
  // killed writer leaves its temporary file (<path>.tmp.<host>.<pid>), never read, until a later save (the
  // next round's writer, or the one below) removes it.
  MESSAGE(advanced, " of ", kRounds, " rounds saved a new version; ", kills_mid_write, " kills landed mid-write");
  CHECK(advanced >= 3);
  CHECK(kills_mid_write >= 1);
  save_version(path, 7);
  CHECK(count_temporaries(dir.path) == 0);
  CHECK(load_version(path) == 7);
}

TEST_CASE("a save removes the temporary files of killed saves of the same path on this host, and only those") {
  TempDir dir;
  const std::string path = dir.path + "/ckpt.safetensors", other = dir.path + "/other.safetensors";
  const std::string host = host_tag();
  // A writer that is still running (a child that sleeps), a dead one, and names that are not ours.
  pid_t alive = ::fork();
  REQUIRE(alive >= 0);
  if (alive == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string dead = std::to_string(dead_pid());
  // Files of this host's dead writer: under this host's name, and under the name older versions wrote.
  const std::vector<std::string> stale = {temporary(path, dead), path + ".tmp." + dead};
  // Files of other hosts sharing the directory (their pids mean nothing here, dead here or not): a host
  // named otherwise, one named with digits only, one whose name extends this host's.
  const std::vector<std::string> other_hosts = {path + ".tmp.other-host." + dead, path + ".tmp.1234." + dead,
                                                path + ".tmp." + host + ".lan." + dead,
                                                path + ".tmp.other-host." + std::to_string(alive)};
  std::vector<std::string> kept = {temporary(path, alive), path + ".tmp." + std::to_string(alive), temporary(other, dead),
                                   other + ".tmp." + dead, path + ".tmp.x" + dead, path + ".tmp.", temporary(path, ""),
                                   path + ".bak." + dead};
  kept.insert(kept.end(), other_hosts.begin(), other_hosts.end());
  for (const std::string& f : kept) touch(f);
  for (const std::string& f : stale) touch(f);
  save_version(path, 1);
  ::kill(alive, SIGKILL);
  ::waitpid(alive, nullptr, 0);
  for (const std::string& f : stale) CHECK_MESSAGE(!fs::exists(f), f, " was left");
  for (const std::string& f : kept) CHECK_MESSAGE(fs::exists(f), f, " was removed");
  CHECK(load_version(path) == 1);

  // The running writer's files go once that writer is gone; a failed save removes nothing; other
  // hosts' files stay.
  const std::vector<std::string> was_alive = {temporary(path, alive), path + ".tmp." + std::to_string(alive)};
  CHECK_THROWS_AS(save_safetensors(path, {{"w", Tensor()}}), Error);
  for (const std::string& f : was_alive) CHECK(fs::exists(f));
  save_version(path, 2);
  for (const std::string& f : was_alive) CHECK_MESSAGE(!fs::exists(f), f, " was left");
  for (const std::string& f : other_hosts) CHECK_MESSAGE(fs::exists(f), f, " was removed");

  // A pid taken since by a process started after the file was last written: the file is stale (on
  // this host; another host's file of that pid and age stays).
  const std::string reused = temporary(path, ::getppid());
  const std::string reused_elsewhere = path + ".tmp.other-host." + std::to_string(::getppid());
  const struct timespec long_ago[2] = {{1000000000, 0}, {1000000000, 0}};  // 2001, before any process here
  for (const std::string& f : {reused, reused_elsewhere}) {
    touch(f);
    REQUIRE(::utimensat(AT_FDCWD, f.c_str(), long_ago, 0) == 0);
  }
  save_version(path, 3);
  CHECK_FALSE(fs::exists(reused));
  CHECK(fs::exists(reused_elsewhere));
  CHECK(load_version(path) == 3);
}

TEST_CASE("a checkpoint cut short at any byte is an error naming the file") {
  TempDir dir;
  const std::string good = dir.path + "/good.safetensors", cut = dir.path + "/cut.safetensors";
  save_safetensors(good, {{"a", arange(5)}, {"b", full({2, 3}, 1.5)}}, {{"epoch", "7"}});
  std::ifstream in(good, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  for (size_t n = 0; n < bytes.size(); ++n) {
    {
      std::ofstream out(cut, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(n));
    }
    INFO("cut after ", n, " of ", bytes.size(), " bytes");
    CHECK_THROWS_WITH_AS(load_safetensors(cut), doctest::Contains(("load_safetensors: " + cut).c_str()), Error);
  }
  CHECK(load_safetensors(good).tensors.size() == 2);
}
