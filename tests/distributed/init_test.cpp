// init_process_group & co, one process per rank (tests/util/multiprocess.h): env://, tcp:// and file://,
// the default group's identity, the data/ hook and the free-function collectives, destroy then init
// again on the same port, and the rendezvous faults (bad options, a missing variable, a rank claimed
// twice, rank 0 included, a rank out of range, disagreeing world sizes, ranks that never come, a port
// in use, a master that comes late) with LOCKSTEP_TIMEOUT bounding rendezvous and collectives.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "data/world.h"
#include "distributed/init.h"
#include "tensor/cuda/cuda.h"
#include "tensor/factory.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"
#include "tests/util/test_util.h"

namespace {
using lockstep::testing::seconds_since;

using lockstep::testing::error_of;
using lockstep::testing::expect_error;

using namespace lockstep;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;


constexpr milliseconds kTimeout{10000};

// A rank starts from a clean slate: nothing inherited from the test runner's environment.
void clear_env() {
  for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCKSTEP_TIMEOUT",
                        "GLOO_SOCKET_IFNAME", "LOCKSTEP_JOB_TOKEN", "LOCKSTEP_JOB_TOKEN_FILE"}) {
    ::unsetenv(v);
  }
}

void set_env(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

dist::InitOptions tcp_options(uint16_t port, int world_size, int rank) {
  return testing::tcp_options(port, world_size, rank, kTimeout);
}

void expect_all(const Tensor& t, double value, const std::string& what) {
  for (double v : t.to_vector<double>()) RANK_CHECK(v == value, what, ": got ", v, ", expected ", value);
}

// The default group as every rank sees it once initialized, and one call of each free collective.
void exercise_default_group(int W, int rank) {
  RANK_CHECK(dist::is_initialized());
  RANK_CHECK(dist::get_rank() == rank, "get_rank() is ", dist::get_rank());
  RANK_CHECK(dist::get_world_size() == W, "get_world_size() is ", dist::get_world_size());
  RANK_CHECK(dist::get_backend() == "gloo", "get_backend() is ", dist::get_backend());
  RANK_CHECK(dist::default_pg()->size() == W);
  auto& provider = data::default_world_provider();
  RANK_CHECK(static_cast<bool>(provider), "data::default_world_provider() is not set");
  RANK_CHECK(provider() == std::make_pair(W, rank), "the data hook says {", provider().first, ", ", provider().second, "}");

  Tensor t = full({5}, rank + 1.0);
  dist::all_reduce(t);
  expect_all(t, W * (W + 1) / 2.0, "all_reduce SUM");
  dist::all_reduce(t, dist::ReduceOp::MAX);
  expect_all(t, W * (W + 1) / 2.0, "all_reduce MAX");
  const int root = W - 1;
  Tensor b = full({3}, rank == root ? 42.0 : 0.0, kInt64);
  dist::broadcast(b, root);
  expect_all(b, 42, "broadcast");
  std::vector<Tensor> gathered;
  for (int r = 0; r < W; ++r) gathered.push_back(zeros({2}, kFloat64));
  dist::all_gather(gathered, full({2}, 10.0 * rank, kFloat64));
  for (int r = 0; r < W; ++r) expect_all(gathered[r], 10.0 * r, "all_gather output " + std::to_string(r));
  Tensor mine = zeros({4});
  std::vector<Tensor> inputs;
  for (int r = 0; r < W; ++r) inputs.push_back(full({4}, 1.0 + r));
  dist::reduce_scatter(mine, inputs, dist::ReduceOp::AVG);
  expect_all(mine, 1.0 + rank, "reduce_scatter AVG");
  dist::barrier();
}

void expect_destroyed() {
  dist::destroy_process_group();
  RANK_CHECK(!dist::is_initialized());
  RANK_CHECK(!data::default_world_provider(), "destroy_process_group left the data hook set");
}

// Every rank must have failed with a message containing `needle`.
void check_all_failed(const std::vector<testing::RankResult>& results, const std::string& needle) {
  for (const auto& r : results) {
    CHECK_MESSAGE(!r.ok(), "process ", r.rank, " succeeded");
    CHECK_MESSAGE(!r.timed_out, "process ", r.rank, ": ", r.message);
    CHECK_MESSAGE(r.message.find(needle) != std::string::npos, "process ", r.rank, ": ", r.message);
  }
}

// A fresh directory per test case (tests/util/test_util.h).
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("lockstep_init_test") {}
};

}  // namespace

TEST_CASE("env:// reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK, as the launcher sets them") {
  const uint16_t port = testing::free_port();
  auto results = testing::run_ranks(3, [&](int rank) {
    clear_env();
    set_env("MASTER_ADDR", "127.0.0.1");
    set_env("MASTER_PORT", std::to_string(port));
    set_env("WORLD_SIZE", "3");
    set_env("RANK", std::to_string(rank));
    set_env("LOCAL_RANK", std::to_string(2 - rank));
    set_env("LOCKSTEP_TIMEOUT", "10");
    dist::init_process_group();
    exercise_default_group(3, rank);
    RANK_CHECK(dist::get_local_rank() == 2 - rank, "get_local_rank() is ", dist::get_local_rank());
    expect_destroyed();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("tcp:// with explicit world size and rank, world sizes 1, 2 and 4") {
  for (int W : {1, 2, 4}) {
    const uint16_t port = testing::free_port();
    auto results = testing::run_ranks(W, [&](int rank) {
      clear_env();
      dist::init_process_group(tcp_options(port, W, rank));
      exercise_default_group(W, rank);
      RANK_CHECK(dist::get_local_rank() == rank, "without LOCAL_RANK, get_local_rank() is the rank");
      expect_destroyed();
    });
    CHECK_MESSAGE(testing::all_ok(results), "world size ", W, ":", testing::failures(results));
  }
}

TEST_CASE("file:// rendezvous through a shared file, which is removed at the end") {
  TempDir dir;
  const std::string path = dir.path + "/rendezvous";
  auto results = testing::run_ranks(2, [&](int rank) {
    clear_env();
    dist::InitOptions o;
    o.init_method = "file://" + path;
    o.world_size = 2;
    o.rank = rank;
    o.timeout = kTimeout;
    dist::init_process_group(o);
    exercise_default_group(2, rank);
    expect_destroyed();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  CHECK_MESSAGE(!std::filesystem::exists(path), "the file store's file is left behind");
}

TEST_CASE("destroy_process_group then init_process_group again, on the same port") {
  const uint16_t port = testing::free_port();
  TempDir dir;
  auto results = testing::run_ranks(3, [&](int rank) {
    clear_env();
    for (int round = 0; round < 4; ++round) {
      if (round % 2 == 0) {
        dist::init_process_group(tcp_options(port, 3, rank));
      } else {
        // file:// on the same path each time: a later round must not see an earlier round's keys.
        dist::InitOptions o = tcp_options(port, 3, rank);
        o.init_method = "file://" + dir.path + "/store";
        dist::init_process_group(o);
      }
      Tensor t = full({100}, round * 10.0 + rank);
      dist::all_reduce(t);
      expect_all(t, round * 30.0 + 3, "round " + std::to_string(round));
      dist::destroy_process_group();
      dist::destroy_process_group();  // a second call does nothing
      RANK_CHECK(!dist::is_initialized());
    }
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("init errors: options, environment, state") {
  auto results = testing::run_ranks(1, [&](int) {
    clear_env();
    const char* vars[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"};
    for (const char* missing : vars) {
      clear_env();
      for (const char* v : vars) {
        if (v != missing) set_env(v, std::string(v) == "MASTER_ADDR" ? "127.0.0.1" : "1");
      }
      set_env("RANK", "0");
      if (std::string(missing) == "RANK") ::unsetenv("RANK");
      expect_error([] { dist::init_process_group(); },
                   std::string("init_process_group: environment variable ") + missing +
                       " is not set (env:// needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK; the launcher sets them)");
    }
    clear_env();
    set_env("MASTER_ADDR", "127.0.0.1");
    set_env("MASTER_PORT", "29500");
    set_env("WORLD_SIZE", "2");
    set_env("RANK", "one");
    expect_error([] { dist::init_process_group(); }, "init_process_group: RANK=\"one\" is not an integer");
    set_env("RANK", "2");
    set_env("LOCKSTEP_TIMEOUT", "0.3");  // how long it tries to tell the (absent) others
    expect_error([] { dist::init_process_group(); }, "init_process_group: rank 2 is out of range for world_size 2");
    ::unsetenv("LOCKSTEP_TIMEOUT");
    set_env("MASTER_PORT", "70000");
    expect_error([] { dist::init_process_group(); }, "MASTER_PORT=70000 is not a port");
    clear_env();

    const uint16_t port = testing::free_port();
    expect_error([&] { dist::init_process_group(tcp_options(port, 0, 0)); }, "world_size must be positive, got 0");
    expect_error([&] { dist::init_process_group(tcp_options(port, 2, -3)); },
                 "tcp:// needs world_size and rank in InitOptions (got world_size=2, rank=-3)");
    auto o = tcp_options(port, 1, 0);
    // A bad tcp://HOST:PORT (parsed by split_host_port, distributed/net/socket.h) is one message naming it.
    for (const std::string bad : {"tcp://127.0.0.1:http", "tcp://127.0.0.1:70000", "tcp://127.0.0.1:0",
                                  "tcp://127.0.0.1:-1", "tcp://127.0.0.1:", "tcp://127.0.0.1", "tcp://:29500",
                                  "tcp://[::1]", "tcp://[::1]:80x/"}) {
      o.init_method = bad;
      expect_error([&] { dist::init_process_group(o); },
                   "init_process_group: init_method \"" + bad + "\" is not tcp://HOST:PORT with a port in 1..65535");
    }
    o.init_method = "udp://127.0.0.1:1234";
    expect_error([&] { dist::init_process_group(o); }, "unknown init_method \"udp://127.0.0.1:1234\"");
    o.init_method = "file://relative/path";
    expect_error([&] { dist::init_process_group(o); }, "is not file:///ABSOLUTE/PATH");
    o = tcp_options(port, 1, 0);
    o.backend = "bogus";
    expect_error([&] { dist::init_process_group(o); }, "unknown backend \"bogus\" (expected gloo, nccl, mpi or auto)");
    // Built with MPI, "mpi" refuses tcp:// (its ranks come from MPI); without, it says so. Either way no
    // MPI is started here (tests/distributed/mpi_test.sh runs the backend under mpirun).
    o.backend = "mpi";
    expect_error([&] { dist::init_process_group(o); }, "init_process_group: backend \"mpi\"");
    o.backend = "gloo";
    o.timeout = milliseconds(0);
    expect_error([&] { dist::init_process_group(o); }, "timeout must be positive");
    o.timeout.reset();
    set_env("LOCKSTEP_TIMEOUT", "soon");
    expect_error([&] { dist::init_process_group(o); }, "LOCKSTEP_TIMEOUT=\"soon\" is not a positive number of seconds");
    clear_env();
    if (cuda::device_count() == 0) {
      o.backend = "nccl";
      expect_error([&] { dist::init_process_group(o); }, "nccl");
    }
    RANK_CHECK(!dist::is_initialized());

    expect_error([] { dist::get_rank(); }, "get_rank: the default process group is not initialized");
    expect_error([] { dist::default_pg(); }, "default_pg: the default process group is not initialized");
    expect_error([] { dist::barrier(); }, "barrier: the default process group is not initialized");
    Tensor t = zeros({1});
    expect_error([&] { dist::all_reduce(t); }, "all_reduce: the default process group is not initialized");
    dist::destroy_process_group();  // nothing to destroy: no error

    o = tcp_options(port, 1, 0);
    o.backend = "auto";
    dist::init_process_group(o);
    if (cuda::device_count() == 0) RANK_CHECK(dist::get_backend() == "gloo", "auto picked ", dist::get_backend());
    expect_error([&] { dist::init_process_group(o); }, "already initialized");
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("a rank claimed by two processes fails the rendezvous on every rank") {
  const uint16_t port = testing::free_port();
  // Processes 1 and 2 both claim rank 1 of 3; nobody is rank 2.
  auto results = testing::run_ranks(3, [&](int process) {
    clear_env();
    dist::init_process_group(tcp_options(port, 3, process == 0 ? 0 : 1));
  });
  check_all_failed(results, "rank 1 was claimed twice");
}

TEST_CASE("ranks that disagree on the world size fail together") {
  const uint16_t port = testing::free_port();
  auto results = testing::run_ranks(2, [&](int rank) {
    clear_env();
    dist::init_process_group(tcp_options(port, rank == 0 ? 2 : 3, rank));
  });
  check_all_failed(results, "world_size");
  for (const auto& r : results) {
    CHECK_MESSAGE(r.message.find("world_size 2") != std::string::npos, r.message);
    CHECK_MESSAGE(r.message.find("world_size 3") != std::string::npos, r.message);
  }
}

TEST_CASE("job token: ranks that share LOCKSTEP_JOB_TOKEN run; a process with another token or none is refused") {
  const uint16_t port = testing::free_port();
  auto results = testing::run_ranks(2, [&](int rank) {
    clear_env();
    set_env("LOCKSTEP_JOB_TOKEN", "0123456789abcdef0123456789abcdef");
    dist::init_process_group(tcp_options(port, 2, rank));
    exercise_default_group(2, rank);
    expect_destroyed();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));

  for (const char* token1 : {"fedcba9876543210fedcba9876543210", ""}) {
    CAPTURE(token1);
    const uint16_t port2 = testing::free_port();
    results = testing::run_ranks(2, [&](int rank) {
      clear_env();
      const std::string token = rank == 0 ? "0123456789abcdef0123456789abcdef" : token1;
      if (!token.empty()) set_env("LOCKSTEP_JOB_TOKEN", token);
      auto o = tcp_options(port2, 2, rank);
      o.timeout = milliseconds(rank == 0 ? 2000 : 10000);  // rank 0 waits in vain for rank 1
      dist::init_process_group(o);
    });
    REQUIRE(results.size() == 2);
    CHECK_FALSE(results[0].ok());
    CHECK(results[1].message == "init_process_group: rank 1: TCPStore: the server at 127.0.0.1:" +
                                    std::to_string(port2) +
                                    " refused this process's job token (wrong or missing LOCKSTEP_JOB_TOKEN)");
  }
}

TEST_CASE("ranks that never join are named when the timeout passes") {
  const uint16_t port = testing::free_port();
  // World size 4; only ranks 0 and 2 start. LOCKSTEP_TIMEOUT sets the timeout.
  auto start = Clock::now();
  auto results = testing::run_ranks(2, [&](int process) {
    clear_env();
    set_env("LOCKSTEP_TIMEOUT", "1");
    auto o = tcp_options(port, 4, process * 2);
    o.timeout.reset();
    dist::init_process_group(o);
  });
  check_all_failed(results, "ranks 1, 3 of world size 4 did not join within 1s");
  CHECK(seconds_since(start) < 1 + 3.0);  // the timeout, plus rank 0 keeping the store up for the others

  // Without rank 0 nobody hosts the store: rank 1 names the address it tried and rank 0's role.
  start = Clock::now();
  results = testing::run_ranks(1, [&](int) {
    clear_env();
    auto o = tcp_options(port, 2, 1);
    o.timeout = milliseconds(500);
    dist::init_process_group(o);
  });
  check_all_failed(results, "could not reach the store at 127.0.0.1:" + std::to_string(port) +
                                " (rank 0 hosts it) within 0.5s");
  CHECK(seconds_since(start) < 0.5 + 2.0);
}

TEST_CASE("rank 0 claimed by two processes fails the rendezvous on every rank") {
  const uint16_t port = testing::free_port();
  // Processes 0 and 1 both claim rank 0 of 3 (the second finds the port taken by the first's store
  // and joins it to report the duplicate); nobody is rank 2.
  auto start = Clock::now();
  auto results = testing::run_ranks(3, [&](int process) {
    clear_env();
    if (process == 1) std::this_thread::sleep_for(milliseconds(300));  // after the first has the port
    dist::init_process_group(tcp_options(port, 3, process == 2 ? 1 : 0));
  });
  check_all_failed(results, "rank 0 was claimed twice");
  CHECK(seconds_since(start) < kTimeout.count() / 1000.0);  // reported at once, not at the timeout
}

TEST_CASE("a rank outside [0, world_size) fails, and tells the ranks waiting for the missing one") {
  const uint16_t port = testing::free_port();
  // World size 3 started as ranks 0, 1 and 3; rank 1 comes late, after the rendezvous has failed, and
  // still learns why (rank 0 keeps the store up until every rank has seen the reason, up to 2 s).
  auto start = Clock::now();
  auto results = testing::run_ranks(3, [&](int process) {
    clear_env();
    if (process == 1) std::this_thread::sleep_for(milliseconds(500));
    dist::init_process_group(tcp_options(port, 3, process == 2 ? 3 : process));
  });
  CHECK(seconds_since(start) < kTimeout.count() / 1000.0);
  REQUIRE(results.size() == 3);
  check_all_failed({results[2]}, "init_process_group: rank 3 is out of range for world_size 3 (ranks are 0..2)");
  check_all_failed({results[0], results[1]},
                   "the rendezvous failed: a process was started with rank 3, out of range for world_size 3");
}

TEST_CASE("a port in use is named in rank 0's error") {
  dist::Socket taken = dist::Socket::listen("127.0.0.1", 0);
  const uint16_t port = taken.local_port();
  auto start = Clock::now();
  auto results = testing::run_ranks(1, [&](int) {
    clear_env();
    dist::init_process_group(tcp_options(port, 1, 0));
  });
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  check_all_failed(results, "init_process_group: rank 0 could not host the store on " + addr +
                                " (is another job using the port?): TCPStore: cannot listen on " + addr +
                                ": Address already in use");
  CHECK(seconds_since(start) < 3.0);
}

TEST_CASE("ranks that start before rank 0 retry until its store is up") {
  const uint16_t port = testing::free_port();
  auto results = testing::run_ranks(2, [&](int rank) {
    clear_env();
    if (rank == 0) std::this_thread::sleep_for(milliseconds(1000));
    auto start = Clock::now();
    dist::init_process_group(tcp_options(port, 2, rank));
    if (rank == 1) RANK_CHECK(seconds_since(start) >= 0.8, "rank 1 joined after ", seconds_since(start), " s");
    Tensor t = full({4}, 1.0);
    dist::all_reduce(t);
    expect_all(t, 2.0, "all_reduce after a late master");
    dist::destroy_process_group();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("LOCKSTEP_TIMEOUT also bounds collectives") {
  const uint16_t port = testing::free_port();
  auto start = Clock::now();
  auto results = testing::run_ranks(2, [&](int rank) {
    clear_env();
    set_env("LOCKSTEP_TIMEOUT", "1.5");
    auto o = tcp_options(port, 2, rank);
    o.timeout.reset();
    dist::init_process_group(o);
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(2500));  // never joins the all_reduce
      return;
    }
    Tensor t = full({4}, 1.0);
    auto begun = Clock::now();
    expect_error([&] { dist::all_reduce(t); }, "1.5s");  // the error names the timeout it waited
    double took = seconds_since(begun);
    RANK_CHECK(took >= 1.0 && took < 3.5, "all_reduce failed after ", took, " s with LOCKSTEP_TIMEOUT=1.5");
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  CHECK(seconds_since(start) < 10.0);
}
