// Faults during training, on gloo ranks in forked processes over loopback: a rank SIGKILLed between
// collectives, in the middle of one, or in the middle of DDP training makes the others fail within
// seconds, naming it; a hung rank is a timeout that says so; and LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL
// turns mismatched or skipped collectives into errors naming both ranks' calls instead of a hang or
// corrupted data. Every expected message is checked word for word.
#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "distributed/ddp.h"
#include "distributed/store/file_store.h"
#include "distributed/init.h"
#include "distributed/gloo/process_group_gloo.h"
#include "nn/api.h"
#include "optim/api.h"
#include "tests/util/gloo_group.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"
#include "tests/util/test_util.h"

namespace {
using lockstep::testing::contains;
using lockstep::testing::seconds_since;

using lockstep::testing::error_of;

using namespace lockstep;
using dist::ProcessGroupGloo;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// The group timeout of these tests: a dead peer must be noticed well before it.
constexpr milliseconds kTimeout{5000};
// How long the rank processes may take in all: generous for a loaded 2-core machine.
constexpr milliseconds kRanksTimeout{60000};

// A fresh directory per test case (tests/util/test_util.h).
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("lockstep_faults") {}
};

// Runs fn(pg, rank) as `world_size` ranks over TCP (tests/util/gloo_group.h); `debug` is
// LOCKSTEP_DISTRIBUTED_DEBUG for the ranks ("" unsets it).
std::vector<testing::RankResult> run_tcp_group(int world_size, const std::string& debug, milliseconds pg_timeout,
                                               const std::function<void(ProcessGroupGloo& pg, int rank)>& fn) {
  ProcessGroupGloo::Options options;
  options.timeout = pg_timeout;
  options.shared_memory = false;  // the TCP paths' faults; tests/distributed/shm_test.cpp has shared memory's
  testing::GroupRun run;
  run.store_timeout = kTimeout;
  run.ranks_timeout = kRanksTimeout;
  run.debug = debug;
  return testing::run_group(world_size, options, fn, run);
}

[[noreturn]] void sigkill_self() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

void check_killed(const testing::RankResult& r) {
  CHECK_MESSAGE(r.exit_code == -1, "rank ", r.rank, ": ", r.message);
  CHECK_MESSAGE(contains(r.message, "killed by signal 9"), "rank ", r.rank, ": ", r.message);
}

}  // namespace

TEST_CASE("a rank SIGKILLed between collectives: the survivor's next all_reduce fails at once, naming it") {
  auto results = run_tcp_group(2, "", kTimeout, [&](ProcessGroupGloo& pg, int rank) {
    Tensor t = ones({1000});
    pg.all_reduce(t)->wait();
    pg.barrier()->wait();
    if (rank == 1) sigkill_self();
    std::this_thread::sleep_for(milliseconds(200));  // the peer is gone before the collective starts
    std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
    RANK_CHECK(contains(message, "ProcessGroupGloo: all_reduce (float32, 1000 elements, SUM) failed on rank 0 of 2: "
                                 "lost connection to rank 1 (peer closed the connection; its process may have died "
                                 "or failed)"),
               message);
    // The group stays failed, and says why.
    message = error_of([&] { pg.barrier()->wait(); });
    RANK_CHECK(contains(message, "barrier not run: an earlier collective failed on this group: all_reduce (float32, "
                                 "1000 elements, SUM): lost connection to rank 1"),
               message);
  });
  CHECK_MESSAGE(results[0].ok(), results[0].message);
  check_killed(results[1]);
}

TEST_CASE("three ranks, one SIGKILLed: both survivors name it") {
  auto results = run_tcp_group(3, "", kTimeout, [&](ProcessGroupGloo& pg, int rank) {
    Tensor t = ones({1000});
    pg.all_reduce(t)->wait();
    pg.barrier()->wait();
    if (rank == 2) sigkill_self();
    std::this_thread::sleep_for(milliseconds(200));
    std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
    RANK_CHECK(contains(message, "failed on rank " + std::to_string(rank) + " of 3: lost connection to rank 2 ("), message);
    // Stay connected a moment, so the other survivor does not see this rank go too.
    std::this_thread::sleep_for(milliseconds(1000));
  });
  CHECK_MESSAGE(results[0].ok(), results[0].message);
  CHECK_MESSAGE(results[1].ok(), results[1].message);
  check_killed(results[2]);
}

TEST_CASE("a rank SIGKILLed in the middle of a large all_reduce: the survivor fails within seconds, naming it") {
  auto results = run_tcp_group(2, "", kTimeout, [&](ProcessGroupGloo& pg, int rank) {
    pg.barrier()->wait();
    Tensor t = ones({8 << 20});  // 32 MiB: the ring is still moving data when rank 1 dies
    auto work = pg.all_reduce(t);
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(2));
      sigkill_self();
    }
    std::string message;
    try {
      work->wait();
    } catch (const Error& e) {
      message = e.what();
    }
    // Rank 1 may have finished its part before dying; then rank 0's all_reduce may succeed too. What
    // must never happen is a hang, or an error that does not say who is gone.
    if (!message.empty()) {
      RANK_CHECK(contains(message, "failed on rank 0 of 2: lost connection to rank 1 ("), message);
    }
    Tensor u = ones({10});
    message = error_of([&] { pg.all_reduce(u)->wait(); });
    RANK_CHECK(contains(message, "lost connection to rank 1 ("), message);
  });
  CHECK_MESSAGE(results[0].ok(), results[0].message);
  check_killed(results[1]);
}

TEST_CASE("a rank SIGKILLed mid-training under DDP: the other's backward throws, naming it") {
  for (const bool shm : {false, true}) {
  CAPTURE(shm);
  const uint16_t port = testing::free_port();
  auto results = testing::run_ranks(
      2,
      [&](int rank) {
        ::setenv("LOCKSTEP_SHM", shm ? "1" : "0", 1);
        testing::init_tcp_group(port, 2, rank, kTimeout);
        manual_seed(0);
        auto model = nn::Sequential(nn::Linear(8, 16), nn::ReLU(),
                                                      nn::Linear(16, 4));
        dist::DistributedDataParallel ddp(model);
        optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1));
        nn::CrossEntropyLoss ce;
        manual_seed(1 + rank);
        for (int step = 0; step < 20; ++step) {
          if (rank == 1 && step == 5) sigkill_self();
          Tensor x = randn({16, 8}), y = randint(0, 4, {16});
          sgd.zero_grad();
          Tensor loss = ce(ddp(x), y);
          try {
            loss.backward();
          } catch (const Error& e) {
            RANK_CHECK(step == 5, "failed at step ", step, ": ", e.what());
            RANK_CHECK(contains(e.what(), "ProcessGroupGloo: all_reduce (float32, "), e.what());
            RANK_CHECK(contains(e.what(), shm ? "failed on rank 0 of 2: shared memory: rank 1 (pid "
                                              : "failed on rank 0 of 2: lost connection to rank 1 ("),
                       e.what());
            return;  // no destroy_process_group: the child leaves with _exit
          }
          sgd.step();
        }
        RANK_CHECK(rank == 1, "rank 0 trained on after rank 1 died");
      },
      kRanksTimeout);
  CHECK_MESSAGE(results[0].ok(), results[0].message);
  check_killed(results[1]);
  }
}

TEST_CASE("a rank that never joins a collective: the others time out, and the error says it timed out") {
  auto results = run_tcp_group(3, "", milliseconds(1000), [&](ProcessGroupGloo& pg, int rank) {
    if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(3000));  // alive, holding its connections, not calling
      return;
    }
    Tensor t = ones({100});
    std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
    // The 1 s timeout, not rank 2's exit at 3 s (which would read "lost connection to rank 2"): the
    // message tells which path noticed, so no clock is read.
    RANK_CHECK(contains(message, "all_reduce (float32, 100 elements, SUM) failed on rank " + std::to_string(rank) +
                                     " of 3: "),
               message);
    // The mesh names the rank whose message never came, and keeps its connections open meanwhile.
    RANK_CHECK(contains(message, ": timed out after 1s waiting for rank 2 (one may be hung, dead, or not "
                                 "calling this collective; LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL names it)"),
               message);
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("ranks that issue different collectives get an error naming both calls, without DETAIL") {
  auto results = run_tcp_group(2, "", kTimeout, [&](ProcessGroupGloo& pg, int rank) {
    Tensor t = ones({rank == 0 ? 10 : 20});  // rank 1 all-reduces twice the elements
    std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
    const std::string other = rank == 0 ? "1" : "0";
    RANK_CHECK(contains(message, "rank " + other + " sent a message of collective #") &&
                   contains(message, rank == 0 ? "(80 bytes)" : "(40 bytes)") &&
                   contains(message, "the ranks issued different collectives"),
               message);
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

// --- LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL ---------------------------------------------------------------

// Both ranks run one matching all_reduce (#1), then `mismatch(pg, rank)` as collective #2, which must
// throw `expected` on every rank.
void expect_mismatch(const std::function<void(ProcessGroupGloo& pg, int rank)>& mismatch, const std::string& expected) {
  auto results = run_tcp_group(2, "DETAIL", kTimeout, [&](ProcessGroupGloo& pg, int rank) {
    RANK_CHECK(pg.checks_collectives());
    Tensor t = full({4}, rank + 1.0);
    pg.all_reduce(t)->wait();
    RANK_CHECK(t.to_vector<float>() == std::vector<float>(4, 3.0f), "the matching all_reduce gave wrong values");
    std::string message = error_of([&] { mismatch(pg, rank); });
    RANK_CHECK(message == expected, "\n  got      \"", message, "\"\n  expected \"", expected, "\"");
    // The group refuses every later collective, naming the mismatch.
    message = error_of([&] { pg.barrier(); });
    RANK_CHECK(message == "barrier() not run: an earlier collective check failed on this group: " + expected, message);
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("DETAIL: a shape mismatch is an error on every rank naming both calls") {
  expect_mismatch(
      [](ProcessGroupGloo& pg, int rank) {
        Tensor t = zeros({rank == 0 ? 1024 : 512});
        pg.all_reduce(t)->wait();
      },
      "collective #2 mismatch: rank 0 called all_reduce(float32 [1024], SUM), rank 1 called all_reduce(float32 [512], "
      "SUM)");
}

TEST_CASE("DETAIL: a dtype mismatch is an error on every rank naming both calls") {
  expect_mismatch(
      [](ProcessGroupGloo& pg, int rank) {
        Tensor t = zeros({2, 3}, rank == 0 ? kFloat32 : kFloat64);
        pg.all_reduce(t)->wait();
      },
      "collective #2 mismatch: rank 0 called all_reduce(float32 [2, 3], SUM), rank 1 called all_reduce(float64 [2, 3], "
      "SUM)");
}

TEST_CASE("DETAIL: different collectives, reduce ops or roots are errors naming both calls") {
  expect_mismatch(
      [](ProcessGroupGloo& pg, int rank) {
        Tensor t = zeros({8});
        if (rank == 0) pg.all_reduce(t)->wait();
        else pg.broadcast(t, 0)->wait();
      },
      "collective #2 mismatch: rank 0 called all_reduce(float32 [8], SUM), rank 1 called broadcast(float32 [8], root 0)");
  expect_mismatch(
      [](ProcessGroupGloo& pg, int rank) {
        Tensor t = zeros({8}, kInt64);
        pg.all_reduce(t, rank == 0 ? dist::ReduceOp::SUM : dist::ReduceOp::MAX)->wait();
      },
      "collective #2 mismatch: rank 0 called all_reduce(int64 [8], SUM), rank 1 called all_reduce(int64 [8], MAX)");
  expect_mismatch(
      [](ProcessGroupGloo& pg, int rank) {
        Tensor t = zeros({3});
        pg.broadcast(t, rank)->wait();
      },
      "collective #2 mismatch: rank 0 called broadcast(float32 [3], root 0), rank 1 called broadcast(float32 [3], root "
      "1)");
  expect_mismatch(
      [](ProcessGroupGloo& pg, int rank) {
        if (rank == 0) {
          pg.barrier()->wait();
        } else {
          Tensor out = zeros({6});
          std::vector<Tensor> chunks = {zeros({6}), zeros({6})};
          pg.all_gather(chunks, out)->wait();
        }
      },
      "collective #2 mismatch: rank 0 called barrier(), rank 1 called all_gather(float32 [6])");
}

TEST_CASE("DETAIL: with three ranks, the odd one out is named against rank 0") {
  auto results = run_tcp_group(3, "DETAIL", kTimeout, [&](ProcessGroupGloo& pg, int rank) {
    Tensor out = zeros({rank == 2 ? 5 : 4});
    std::vector<Tensor> inputs(3, zeros({rank == 2 ? 5 : 4}));
    std::string message = error_of([&] { pg.reduce_scatter(out, inputs)->wait(); });
    const std::string expected = "collective #1 mismatch: rank 0 called reduce_scatter(float32 [4], SUM), rank 2 "
                                 "called reduce_scatter(float32 [5], SUM)";
    RANK_CHECK(message == expected, message);
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("DETAIL: a rank that skips a collective is named when the others time out waiting for it") {
  auto results = run_tcp_group(2, "DETAIL", milliseconds(1500), [&](ProcessGroupGloo& pg, int rank) {
    Tensor t = full({4}, 1.0);
    pg.all_reduce(t)->wait();
    if (rank == 1) return;  // skips collective #2
    auto start = Clock::now();
    std::string message;
    try {
      pg.all_reduce(t)->wait();
    } catch (const lockstep::TimeoutError& e) {
      message = e.what();
    }
    RANK_CHECK(message == "rank 1 did not call collective #2 all_reduce(float32 [4], SUM) within 1.5s", message);
    RANK_CHECK(seconds_since(start) >= 1.4, "gave up after ", seconds_since(start), " s, before the timeout");
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("DETAIL: matching collectives give the right values, and old fingerprints are removed") {
  TempDir dir;
  auto results = testing::run_ranks(
      2,
      [&](int rank) {
        ::setenv("LOCKSTEP_DISTRIBUTED_DEBUG", "detail", 1);  // any case
        auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 2, kTimeout);
        ProcessGroupGloo pg(store, rank, 2, kTimeout);
        auto run = [&](int n) {
          for (int i = 0; i < n; ++i) {
            Tensor t = full({7}, rank + 1.0 + i);
            pg.all_reduce(t)->wait();
            RANK_CHECK(t.to_vector<float>() == std::vector<float>(7, 3.0f + 2 * i), "all_reduce ", i);
          }
          pg.barrier()->wait();
        };
        run(3);
        const int64_t keys_before = store->num_keys();
        run(30);
        // The store holds each rank's latest fingerprints, not one per collective (give or take the
        // other rank's next one, or the one it is about to remove).
        const int64_t added = store->num_keys() - keys_before;
        RANK_CHECK(added >= -2 && added <= 2, added, " keys added by 31 collectives");
      },
      kRanksTimeout);
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("DETAIL off (unset, OFF or INFO): no fingerprints, no store traffic; a bad value is an error") {
  for (std::string level : {"", "OFF", "INFO"}) {
    TempDir dir;
    auto results = testing::run_ranks(
        2,
        [&](int rank) {
          if (level.empty()) ::unsetenv("LOCKSTEP_DISTRIBUTED_DEBUG");
          else ::setenv("LOCKSTEP_DISTRIBUTED_DEBUG", level.c_str(), 1);
          auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 2, kTimeout);
          ProcessGroupGloo pg(store, rank, 2, kTimeout);
          RANK_CHECK(!pg.checks_collectives());
          pg.barrier()->wait();  // both ranks are done with the store's rendezvous keys
          const int64_t keys_before = store->num_keys();
          for (int i = 0; i < 5; ++i) {
            Tensor t = full({3}, rank + 1.0);
            pg.all_reduce(t)->wait();
            RANK_CHECK(t.to_vector<float>() == std::vector<float>(3, 3.0f));
          }
          RANK_CHECK(store->num_keys() == keys_before, "collectives wrote to the store");
        },
        kRanksTimeout);
    CHECK_MESSAGE(testing::all_ok(results), "LOCKSTEP_DISTRIBUTED_DEBUG=", level, testing::failures(results));
  }
  TempDir dir;
  ::setenv("LOCKSTEP_DISTRIBUTED_DEBUG", "LOUD", 1);
  auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 1, kTimeout);
  CHECK_THROWS_WITH_AS(ProcessGroupGloo(store, 0, 1, kTimeout),
                       "LOCKSTEP_DISTRIBUTED_DEBUG=\"LOUD\" is not one of OFF, INFO, DETAIL", Error);
  ::unsetenv("LOCKSTEP_DISTRIBUTED_DEBUG");
}
