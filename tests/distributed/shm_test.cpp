// Same-host shared-memory collectives (distributed/shm/): the segment's checks, that ProcessGroupGloo
// picks shared memory only where every rank agrees, the values and bits of every collective, and the
// faults: a dead rank, a rank that never comes, mismatched collectives, and nothing left in /dev/shm.
// Every check is on what the code did (its messages, results and files), never on timing; deadlines
// are hang guards.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/gloo/process_group_gloo.h"
#include "distributed/shm/host.h"
#include "distributed/shm/segment.h"
#include "distributed/shm/shm_group.h"
#include "distributed/store/file_store.h"
#include "distributed/store/prefix_store.h"
#include "tensor/factory.h"
#include "tests/util/gloo_group.h"
#include "tests/util/multiprocess.h"
#include "tests/util/test_util.h"

namespace {

using lockstep::testing::contains;
using lockstep::testing::error_of;
using lockstep::testing::run_group;  // tests/util/gloo_group.h: FileStore waits of 20 s, as kTimeout
using namespace lockstep;
using dist::ProcessGroupGloo;
using dist::shm::ShmGroup;
using dist::shm::ShmSegment;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout{20000};

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("lockstep_shm_test") {}
};

bool in_dev_shm(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

std::string fresh_name() {
  static int n = 0;
  return "/lockstep-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

ProcessGroupGloo::Options with_timeout(milliseconds timeout) {
  ProcessGroupGloo::Options o;
  o.timeout = timeout;
  return o;
}

[[noreturn]] void sigkill_self() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

template <typename T>
Tensor from(const std::vector<T>& v) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, dtype_of<T>::value);
  std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return t;
}

}  // namespace

TEST_CASE("segment: created, attached, and its name gone once every rank has counted itself") {
  const std::string name = fresh_name();
  const uint64_t nonce[2] = {1, 2};
  ShmSegment a = ShmSegment::create(name, 8192, 2, nonce);
  CHECK(in_dev_shm(name));
  ShmSegment b = ShmSegment::attach(name, 8192, 2, nonce);
  a.data()[0] = 42;
  CHECK(b.data()[0] == 42);  // one memory
  CHECK_FALSE(a.count_attached());
  CHECK(in_dev_shm(name));
  CHECK(b.count_attached());  // the last removes the name
  CHECK_FALSE(in_dev_shm(name));
  a.data()[1] = 7;
  CHECK(b.data()[1] == 7);  // still mapped
}

TEST_CASE("segment: two jobs never share one; wrong size, foreign nonce or layout are refused") {
  const std::string name = fresh_name();
  const uint64_t nonce[2] = {11, 22}, other[2] = {11, 23};
  ShmSegment a = ShmSegment::create(name, 8192, 2, nonce);
  std::string message = error_of([&] { ShmSegment::create(name, 8192, 2, nonce); });
  CHECK_MESSAGE(contains(message, "shared memory: cannot create " + name + ": File exists"), message);
  message = error_of([&] { ShmSegment::attach(name, 16384, 2, nonce); });
  CHECK_MESSAGE(contains(message, "shared memory: refused " + name + ": it has 8192 bytes, this job expects 16384"),
                message);
  message = error_of([&] { ShmSegment::attach(name, 8192, 2, other); });
  CHECK_MESSAGE(contains(message, "shared memory: refused " + name + ": it belongs to another job"), message);
  message = error_of([&] { ShmSegment::attach(name, 8192, 3, nonce); });
  CHECK_MESSAGE(contains(message, "made for 2 ranks and 8192 bytes, this job has 3 ranks on this host"), message);
  a.data()[-int(ShmSegment::kHeaderBytes)] = 0;  // the magic's first byte: no longer a lockstep segment
  message = error_of([&] { ShmSegment::attach(name, 8192, 2, nonce); });
  CHECK_MESSAGE(contains(message, ": not a lockstep segment of layout version 2"), message);
  ShmSegment::unlink(name);
  message = error_of([&] { ShmSegment::attach(name, 8192, 2, nonce); });
  CHECK_MESSAGE(contains(message, "shared memory: cannot open " + name + ": No such file or directory"), message);
}

TEST_CASE("host identity: this process has one, and the layout groups ranks by it") {
  const std::string id = dist::shm::host_identity();
  CHECK(contains(id, "boot "));
  CHECK(contains(id, " net "));
  TempDir dir;
  auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 1, kTimeout);
  store->set("host/1", "elsewhere");
  store->set("host/2", id);
  auto layout = dist::shm::exchange_host_layout(*store, 0, 3, kTimeout, true);
  CHECK(layout.enabled);
  CHECK(layout.host_of == std::vector<int>{0, 1, 0});
  CHECK(layout.ranks_on == std::vector<std::vector<int>>{{0, 2}, {1}});
  store->set("host/1", "off");  // one rank with shared memory off turns it off for all
  CHECK_FALSE(dist::shm::exchange_host_layout(*store, 0, 3, kTimeout, true).enabled);
}

TEST_CASE("transport: shared memory on one host, unless turned off by option or LOCKSTEP_SHM=0 on any rank") {
  for (int W : {1, 2, 3}) {
    auto results = run_group(W, with_timeout(kTimeout), [&](ProcessGroupGloo& pg, int rank) {
      RANK_CHECK(pg.transport() == (W > 1 ? "shm" : "tcp"), "world ", W, ": transport ", pg.transport());
    });
    CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  }
  auto off = with_timeout(kTimeout);
  off.shared_memory = false;
  auto results = run_group(2, off, [&](ProcessGroupGloo& pg, int) { RANK_CHECK(pg.transport() == "tcp", pg.transport()); });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  // LOCKSTEP_SHM=0 on rank 1 alone: TCP on every rank.
  results = [&] {
    TempDir dir;
    return testing::run_ranks(3, [&](int rank) {
      if (rank == 1) ::setenv("LOCKSTEP_SHM", "0", 1);
      auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 3, kTimeout);
      ProcessGroupGloo pg(store, rank, 3, with_timeout(kTimeout));
      RANK_CHECK(pg.transport() == "tcp", "rank ", rank, ": ", pg.transport());
      Tensor t = full({5}, rank + 1.0);
      pg.all_reduce(t, dist::ReduceOp::SUM, false);
      RANK_CHECK(t.to_vector<float>() == std::vector<float>(5, 6.0f));
    });
  }();
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  results = [&] {
    TempDir dir;
    return testing::run_ranks(1, [&](int rank) {
      ::setenv("LOCKSTEP_SHM", "yes", 1);
      auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 1, kTimeout);
      std::string message = error_of([&] { ProcessGroupGloo pg(store, rank, 1, with_timeout(kTimeout)); });
      RANK_CHECK(contains(message, "LOCKSTEP_SHM is \"yes\"; expected 0 (TCP only) or 1"), message);
    });
  }();
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("shared memory: float sums are the same bits on every rank, folded in rank order, in every step size") {
  for (size_t slot : {size_t{4096}, size_t{1} << 20}) {
    for (int W : {2, 3, 4}) {
      auto options = with_timeout(kTimeout);
      options.shm_slot_bytes = slot;
      TempDir dir;
      auto results = testing::run_ranks(W, [&](int rank) {
        auto store = std::make_shared<dist::FileStore>(dir.path + "/store", W, kTimeout);
        ProcessGroupGloo pg(store, rank, W, options);
        RANK_CHECK(pg.transport() == "shm");
        auto value = [](int r, int64_t i) {
          const uint64_t h = (static_cast<uint64_t>(i) * 2654435761u + static_cast<uint64_t>(r) * 40503u) % 1000003u;
          return static_cast<float>((h % 2 ? -1.0 : 1.0) * std::pow(10.0, static_cast<double>(h % 13) - 6.0) *
                                    (1.0 + static_cast<double>(h % 1000) / 1000.0));
        };
        for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{5000}, int64_t{300007}}) {
          std::vector<float> v(n);
          for (int64_t i = 0; i < n; ++i) v[i] = value(rank, i);
          Tensor t = from(v);
          pg.all_reduce(t, dist::ReduceOp::SUM, false);
          const float* got = t.data<float>();
          for (int64_t i = 0; i < n; ++i) {
            float fold = value(0, i);
            for (int r = 1; r < W; ++r) fold += value(r, i);
            RANK_CHECK(got[i] == fold, "element ", i, " of ", n, " is ", got[i], ", the rank-order fold is ", fold);
          }
          store->set("bits/" + std::to_string(n) + "/" + std::to_string(rank),
                     std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(got),
                                          reinterpret_cast<const uint8_t*>(got + n)));
          for (int r = 0; r < W; ++r) {
            const std::string key = "bits/" + std::to_string(n) + "/" + std::to_string(r);
            store->wait({key}, kTimeout);
            RANK_CHECK(store->get(key) == store->get("bits/" + std::to_string(n) + "/" + std::to_string(rank)),
                       "rank ", r, " has other bits");
          }
        }
      });
      CHECK_MESSAGE(testing::all_ok(results), "slot ", slot, ", world ", W, ":", testing::failures(results));
    }
  }
}

TEST_CASE("shared memory: every collective over several steps (small slots), mixed and asynchronous") {
  auto options = with_timeout(kTimeout);
  options.shm_slot_bytes = 4096;  // 1024 floats a step: every size below takes several
  auto results = run_group(3, options, [&](ProcessGroupGloo& pg, int rank) {
    const int W = 3;
    for (int64_t n : {int64_t{3}, int64_t{4095}, int64_t{10001}}) {
      // broadcast from every root, all_gather into separate tensors, reduce_scatter with MAX.
      for (int root = 0; root < W; ++root) {
        Tensor t = full({n}, rank == root ? 10.0 * root + 1 : -1.0, kFloat64);
        pg.broadcast(t, root)->wait();
        RANK_CHECK(t.to_vector<double>() == std::vector<double>(n, 10.0 * root + 1), "broadcast from ", root);
      }
      std::vector<Tensor> outs;
      for (int r = 0; r < W; ++r) outs.push_back(full({n}, -1, kInt64));
      pg.all_gather(outs, full({n}, rank * 7, kInt64))->wait();
      for (int r = 0; r < W; ++r) RANK_CHECK(outs[r].to_vector<int64_t>() == std::vector<int64_t>(n, r * 7));
      std::vector<Tensor> ins;
      for (int j = 0; j < W; ++j) ins.push_back(full({n}, 100 * j + rank, kInt64));
      Tensor out = full({n}, -1, kInt64);
      pg.reduce_scatter(out, ins, dist::ReduceOp::MAX)->wait();
      RANK_CHECK(out.to_vector<int64_t>() == std::vector<int64_t>(n, 100 * rank + W - 1));
      // Queued back to back: each waits its turn, and the buffers alternate correctly.
      Tensor a = full({n}, rank + 1.0), b = full({n}, 2.0);
      auto w1 = pg.all_reduce(a, dist::ReduceOp::AVG);
      auto w2 = pg.all_reduce(b, dist::ReduceOp::PRODUCT);
      auto w3 = pg.barrier();
      w1->wait();
      w2->wait();
      w3->wait();
      RANK_CHECK(a.to_vector<float>() == std::vector<float>(n, 2.0f));
      RANK_CHECK(b.to_vector<float>() == std::vector<float>(n, 8.0f));
    }
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("shared memory faults: a rank SIGKILLed between collectives is named by the survivors") {
  for (int W : {2, 3}) {
    auto results = run_group(W, with_timeout(kTimeout), [&](ProcessGroupGloo& pg, int rank) {
      Tensor t = ones({1000});
      pg.all_reduce(t)->wait();
      if (rank == W - 1) sigkill_self();
      std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
      RANK_CHECK(contains(message, "ProcessGroupGloo: all_reduce (float32, 1000 elements, SUM) failed on rank " +
                                       std::to_string(rank) + " of " + std::to_string(W) + ": shared memory: rank " +
                                       std::to_string(W - 1) + " (pid "),
                 message);
      RANK_CHECK(contains(message, ") exited during all_reduce (its process died or failed)"), message);
      message = error_of([&] { pg.barrier()->wait(); });
      RANK_CHECK(contains(message, "barrier not run: an earlier collective failed on this group"), message);
    });
    for (int r = 0; r < W - 1; ++r) CHECK_MESSAGE(results[r].ok(), results[r].message);
    CHECK(contains(results[W - 1].message, "killed by signal 9"));
  }
}

TEST_CASE("shared memory faults: a rank SIGKILLed in the middle of a large all_reduce") {
  auto results = run_group(2, with_timeout(kTimeout), [&](ProcessGroupGloo& pg, int rank) {
    pg.barrier()->wait();
    Tensor t = ones({8 << 20});
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
    // Rank 1 may have finished its part before dying; what must never happen is a hang or an error
    // that does not name it.
    if (!message.empty()) RANK_CHECK(contains(message, "shared memory: rank 1 (pid "), message);
    Tensor u = ones({10});
    message = error_of([&] { pg.all_reduce(u)->wait(); });
    RANK_CHECK(contains(message, "rank 1 (pid "), message);
  });
  CHECK_MESSAGE(results[0].ok(), results[0].message);
  CHECK(contains(results[1].message, "killed by signal 9"));
}

TEST_CASE("shared memory faults: a rank that never joins makes the others time out naming it") {
  auto results = run_group(3, with_timeout(milliseconds(1000)), [&](ProcessGroupGloo& pg, int rank) {
    if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(3000));  // alive, not calling
      return;
    }
    Tensor t = ones({100});
    std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
    RANK_CHECK(contains(message, "all_reduce (float32, 100 elements, SUM) failed on rank " + std::to_string(rank) +
                                     " of 3: shared memory: timed out after 1s in all_reduce waiting for rank 2 (pid "),
               message);
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("shared memory faults: ranks that issue different collectives are told, naming both") {
  auto results = run_group(2, with_timeout(kTimeout), [&](ProcessGroupGloo& pg, int rank) {
    Tensor t = ones({rank == 0 ? 10 : 20});
    std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
    const std::string other = rank == 0 ? "1" : "0";
    RANK_CHECK(contains(message, "shared memory: rank " + other + " is in all_reduce of " +
                                     (rank == 0 ? "80" : "40") + " bytes at this step, rank " + std::to_string(rank) +
                                     " in all_reduce of " + (rank == 0 ? "40" : "80") + " bytes"),
               message);
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("shared memory: no segment is left in /dev/shm, whether setup succeeds or a rank dies in it") {
  // Success: every rank checks that the name is gone once the group exists.
  TempDir dir;
  auto results = testing::run_ranks(3, [&](int rank) {
    auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 3, kTimeout);
    dist::PrefixStore prefixed("ok", store);
    ShmGroup group(prefixed, {0, 1, 2}, rank, dist::shm::ShmOptions{4096, kTimeout});
    RANK_CHECK(!in_dev_shm(group.segment_name()), group.segment_name(), " is still in /dev/shm");
    group.barrier();
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  // Rank 1 is SIGKILLed before it attaches: rank 0, which created the segment, removes it on timeout.
  results = testing::run_ranks(2, [&](int rank) {
    auto store = std::make_shared<dist::FileStore>(dir.path + "/store2", 2, kTimeout);
    dist::PrefixStore prefixed("killed", store);
    if (rank == 1) {
      store->wait({"killed/shm/ready"}, kTimeout);
      sigkill_self();
    }
    std::string message =
        error_of([&] { ShmGroup group(prefixed, {0, 1}, rank, dist::shm::ShmOptions{4096, milliseconds(1000)}); });
    RANK_CHECK(contains(message, "shared memory: rank 0 could not set up the segment /lockstep-"), message);
    const std::string name = store->get_string("killed/shm/name");
    RANK_CHECK(!in_dev_shm(name), name, " is still in /dev/shm");
  });
  CHECK_MESSAGE(results[0].ok(), results[0].message);
  CHECK(contains(results[1].message, "killed by signal 9"));
}
