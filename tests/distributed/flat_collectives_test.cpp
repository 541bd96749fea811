// The flat collectives sharding is built on (all_gather_into_tensor, reduce_scatter_tensor) on the gloo
// backend's transports: shared memory, and TCP (the ring on DirectMesh), at world sizes 1 to 4, every
// ReduceOp and dtype, odd element counts, out of place and in place, over several steps of small
// shared-memory slots; and the faults: a rank SIGKILLed in the middle of either makes the others fail
// within the timeout naming it, and no shared-memory segment outlives the group. Values from
// tests/distributed/flat_values.h, worked out by hand; no check depends on timing (deadlines are hang
// guards).
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distributed/gloo/process_group_gloo.h"
#include "distributed/shm/shm_group.h"
#include "distributed/store/file_store.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tests/distributed/flat_values.h"
#include "tests/util/gloo_group.h"
#include "tests/util/multiprocess.h"
#include "tests/util/test_util.h"

namespace {

using namespace lockstep;
using dist::ProcessGroupGloo;
using dist::ReduceOp;
using lockstep::testing::contains;
using lockstep::testing::error_of;
using std::chrono::milliseconds;
namespace flat = lockstep::testing::flat;

constexpr milliseconds kTimeout{20000};

ProcessGroupGloo::Options options_for(bool shm, milliseconds timeout = kTimeout) {
  ProcessGroupGloo::Options o;
  o.timeout = timeout;
  o.shared_memory = shm;
  o.shm_slot_bytes = 4096;  // a 1001-element int64 chunk takes several steps
  return o;
}

const std::vector<Dtype> kDtypes = {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16};
const std::vector<ReduceOp> kOps = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX};
// Per-rank chunk lengths: odd, one element, under a slot, and several slots.
const std::vector<int64_t> kCounts = {1, 7, 1001};

std::string describe(const char* what, Dtype dtype, ReduceOp op, int64_t n, bool in_place) {
  return lockstep::detail::str_cat(what, " (", dtype_name(dtype), ", ", dist::reduce_op_name(op), ", ", n,
                                   " elements per rank, ", in_place ? "in place" : "out of place", ")");
}

// Every dtype, op and count, out of place and in place, on one group.
void check_every_case(ProcessGroupGloo& pg, int rank) {
  const int W = pg.size();
  for (Dtype dtype : kDtypes) {
    for (int64_t n : kCounts) {
      for (bool in_place : {false, true}) {
        // all_gather_into_tensor: rank r's chunk is value(SUM, r, j).
        Tensor gathered = zeros({W * n}, dtype);
        Tensor mine = flat::input(dtype, ReduceOp::SUM, rank, n);
        if (in_place) {
          Tensor slot = gathered.narrow(0, rank * n, n);
          slot.copy_(mine);
          pg.all_gather_into_tensor(gathered, slot)->wait();
        } else {
          pg.all_gather_into_tensor(gathered, mine)->wait();
        }
        const std::string wrong = flat::check_gathered(gathered, W);
        RANK_CHECK(wrong.empty(), describe("all_gather_into_tensor", dtype, ReduceOp::SUM, n, in_place), ": ", wrong);

        for (ReduceOp op : kOps) {
          Tensor whole = flat::input(dtype, op, rank, W * n);
          Tensor out = in_place ? whole.narrow(0, rank * n, n) : zeros({n}, dtype);
          pg.reduce_scatter_tensor(out, whole, op)->wait();
          const std::string bad = flat::check_reduced(out, op, W, rank);
          RANK_CHECK(bad.empty(), describe("reduce_scatter_tensor", dtype, op, n, in_place), ": ", bad);
          if (in_place) {
            // The other chunks of the input are left as they were.
            for (int r = 0; r < W; ++r) {
              if (r == rank) continue;
              const std::string changed = flat::first_wrong(
                  whole.narrow(0, r * n, n), [&](auto t, int64_t j) { return static_cast<decltype(t)>(flat::value(op, rank, r * n + j)); });
              RANK_CHECK(changed.empty(), describe("reduce_scatter_tensor", dtype, op, n, true), ": chunk ", r,
                         " of the input changed: ", changed);
            }
          }
        }
      }
    }
  }
}

void run_every_case(bool shm) {
  for (int W = 1; W <= 4; ++W) {
    CAPTURE(W);
    auto results = testing::run_group(W, options_for(shm), [&](ProcessGroupGloo& pg, int rank) {
      if (W > 1) RANK_CHECK(pg.transport() == (shm ? "shm" : "tcp"), "transport ", pg.transport());
      check_every_case(pg, rank);
    });
    CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  }
}

[[noreturn]] void sigkill_self() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

// This process's shared-memory mappings of lockstep segments that still have a name in /dev/shm (a
// mapping of a removed name reads "/dev/shm/lockstep-... (deleted)" in /proc/self/maps).
std::vector<std::string> named_segments_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> named;
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find("/dev/shm/lockstep-");
    if (at == std::string::npos) continue;
    const std::string path = line.substr(at, line.find(' ', at) - at);
    if (std::filesystem::exists(path)) named.push_back(path);
  }
  return named;
}

// W ranks; rank W - 1 dies in the middle of a large flat collective (`gather` or reduce-scatter), the
// others must fail naming it, or finish if it had done its part, and the group must then refuse.
void check_killed_mid_collective(bool shm, int W, bool gather) {
  const char* op = gather ? "all_gather_into_tensor" : "reduce_scatter_tensor";
  CAPTURE(shm);
  CAPTURE(W);
  CAPTURE(op);
  testing::GroupRun run;
  run.ranks_timeout = milliseconds(90000);
  auto results = testing::run_group(W, options_for(shm), [&](ProcessGroupGloo& pg, int rank) {
    pg.barrier()->wait();
    RANK_CHECK(named_segments_mapped().empty(), "a segment still has a name in /dev/shm");
    const int64_t n = 2 << 20;  // 8 MiB per rank: the collective is still moving data when the rank dies
    Tensor whole = ones({W * n}), part = ones({n});
    const auto start = std::chrono::steady_clock::now();
    auto work = gather ? pg.all_gather_into_tensor(whole, part) : pg.reduce_scatter_tensor(part, whole);
    if (rank == W - 1) {
      std::this_thread::sleep_for(milliseconds(1));
      sigkill_self();
    }
    const std::string dead = shm ? "shared memory: rank " + std::to_string(W - 1) + " (pid "
                                 : "lost connection to rank " + std::to_string(W - 1) + " (";
    std::string message;
    try {
      work->wait();
    } catch (const Error& e) {
      message = e.what();
    }
    // The dead rank may have done its part before it died, and the collective then completes. What must
    // never happen is a hang, a timeout, or an error that does not name it.
    if (!message.empty()) {
      RANK_CHECK(contains(message, lockstep::detail::str_cat(op, " (float32, ", n, " elements")), message);
      RANK_CHECK(contains(message, dead), message);
      RANK_CHECK(!contains(message, "timed out"), message);
    }
    Tensor u = ones({W * 10}), v = ones({10});
    message = error_of([&] { pg.all_gather_into_tensor(u, v)->wait(); });
    RANK_CHECK(contains(message, dead) || contains(message, "an earlier collective failed"), message);
    RANK_CHECK(!contains(message, "timed out"), message);
    RANK_CHECK(testing::seconds_since(start) < std::chrono::duration<double>(kTimeout).count(),
               "the failure took longer than the group's timeout");
    RANK_CHECK(named_segments_mapped().empty(), "a segment still has a name in /dev/shm");
  }, run);
  for (int r = 0; r < W - 1; ++r) CHECK_MESSAGE(results[r].ok(), results[r].message);
  CHECK_MESSAGE(contains(results[W - 1].message, "killed by signal 9"), results[W - 1].message);
}

}  // namespace

TEST_CASE("flat collectives over shared memory: every dtype and op, world sizes 1 to 4, in and out of place") {
  run_every_case(/*shm=*/true);
}

TEST_CASE("flat collectives over TCP (the ring on DirectMesh): every dtype and op, world sizes 1 to 4") {
  run_every_case(/*shm=*/false);
}

TEST_CASE("shared memory: large flat collectives read the other ranks' memory directly, with the segment's results") {
  // From ShmGroup::kDirectMinBytes (16 KiB) per rank the ranks read each other's inputs (process_vm_readv) where
  // the host allows it; LOCKSTEP_SHM_CMA=0 keeps them on the segment. Both must give the hand-computed
  // values, for every op and for the dtypes' sizes on either side of the threshold.
  for (const char* cma : {"1", "0"}) {
    for (int W : {2, 3}) {
      CAPTURE(cma);
      CAPTURE(W);
      testing::TempDir dir("lockstep_flat_direct");
      auto results = testing::run_ranks(W, [&](int rank) {
        ::setenv("LOCKSTEP_SHM_CMA", cma, 1);
        auto store = std::make_shared<dist::FileStore>(dir.path + "/store", W, kTimeout);
        std::vector<int> ranks(W);
        for (int r = 0; r < W; ++r) ranks[r] = r;
        dist::shm::ShmGroup group(*store, ranks, rank, dist::shm::ShmOptions{size_t{1} << 20, kTimeout});
        // This machine's kernel allows cross-memory attach between a process's own children (Linux's
        // default); where it did not, the probe would have turned direct reads off on every rank.
        RANK_CHECK(group.direct_reads() == (std::string(cma) == "1"), "direct reads ", group.direct_reads());
        // 3001 elements: 6 KB of bfloat16 and 12 KB of float32 per rank stay on the segment, 24 KB of int64
        // read directly; 100003: several of the direct reduce-scatter's blocks.
        for (auto [dtype, n] : {std::pair{kFloat32, int64_t{3001}}, std::pair{kInt64, int64_t{3001}},
                                std::pair{kBFloat16, int64_t{3001}}, std::pair{kFloat32, int64_t{100003}},
                                std::pair{kBFloat16, int64_t{100003}}}) {
          Tensor mine = flat::input(dtype, ReduceOp::SUM, rank, n);
          Tensor gathered = zeros({W * n}, dtype);
          std::vector<void*> outs(W);
          for (int r = 0; r < W; ++r) outs[r] = static_cast<char*>(gathered.data_ptr()) + r * mine.nbytes();
          group.all_gather(mine.data_ptr(), outs, mine.nbytes());
          const std::string wrong = flat::check_gathered(gathered, W);
          RANK_CHECK(wrong.empty(), "all_gather ", dtype_name(dtype), " ", n, ": ", wrong);
          for (ReduceOp op : kOps) {
            Tensor whole = flat::input(dtype, op, rank, W * n);
            Tensor out = zeros({n}, dtype);
            group.reduce_scatter_flat(whole.data_ptr(), out.data_ptr(), n, dtype, op, W);
            const std::string bad = flat::check_reduced(out, op, W, rank);
            RANK_CHECK(bad.empty(), "reduce_scatter_flat ", dtype_name(dtype), " ", dist::reduce_op_name(op), ": ", bad);
            // In place: the output is this rank's chunk of the input.
            Tensor again = flat::input(dtype, op, rank, W * n);
            group.reduce_scatter_flat(again.data_ptr(), static_cast<char*>(again.data_ptr()) + rank * out.nbytes(), n,
                                      dtype, op, W);
            const std::string bad2 = flat::check_reduced(again.narrow(0, rank * n, n), op, W, rank);
            RANK_CHECK(bad2.empty(), "reduce_scatter_flat in place ", dtype_name(dtype), " ", dist::reduce_op_name(op),
                       ": ", bad2);
          }
        }
      });
      CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
    }
  }
}

TEST_CASE("flat collectives: the shared-memory and TCP results are the same bits for float32 SUM") {
  // Each transport reduces every element in one order on every rank; for small integers any order is
  // exact, so both must give exactly the hand-computed sum, and the same bits on every rank.
  for (bool shm : {true, false}) {
    auto results = testing::run_group(3, options_for(shm), [&](ProcessGroupGloo& pg, int rank) {
      Tensor whole = flat::input(kFloat32, ReduceOp::SUM, rank, 3 * 4097);
      Tensor out = zeros({4097});
      pg.reduce_scatter_tensor(out, whole, ReduceOp::SUM, /*async_op=*/false);
      const std::string bad = flat::check_reduced(out, ReduceOp::SUM, 3, rank);
      RANK_CHECK(bad.empty(), bad);
    });
    CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  }
}

TEST_CASE("flat collectives faults: a rank SIGKILLed in the middle is named, nothing hangs, no segment is left") {
  for (bool shm : {true, false}) {
    for (bool gather : {true, false}) check_killed_mid_collective(shm, 2, gather);
  }
  // Three ranks on shared memory, where every rank waits on every other at each step. (Around a TCP ring
  // a survivor waits only on its neighbours: one whose neighbours are alive but failed waits for the
  // timeout, which names the rank it waits for; the ring's faults are checked at two ranks.)
  check_killed_mid_collective(/*shm=*/true, 3, /*gather=*/false);
  check_killed_mid_collective(/*shm=*/true, 3, /*gather=*/true);
}

TEST_CASE("flat collectives faults: a rank that dies before joining is named by the ranks waiting in it") {
  // Deterministic: the survivors are certainly inside the collective when the rank dies.
  for (bool shm : {true, false}) {
    for (bool gather : {true, false}) {
      auto results = testing::run_group(2, options_for(shm), [&](ProcessGroupGloo& pg, int rank) {
        pg.barrier()->wait();
        if (rank == 1) sigkill_self();
        Tensor whole = ones({2 * 1000}), part = ones({1000});
        std::string message =
            error_of([&] { gather ? pg.all_gather_into_tensor(whole, part)->wait() : pg.reduce_scatter_tensor(part, whole)->wait(); });
        const char* op = gather ? "all_gather_into_tensor" : "reduce_scatter_tensor";
        RANK_CHECK(contains(message, lockstep::detail::str_cat("ProcessGroupGloo: ", op, " (float32, 1000 elements")),
                   message);
        RANK_CHECK(contains(message, shm ? "shared memory: rank 1 (pid " : "lost connection to rank 1 ("), message);
        if (shm) RANK_CHECK(contains(message, ") exited during "), message);
        RANK_CHECK(named_segments_mapped().empty(), "a segment still has a name in /dev/shm");
      });
      CHECK_MESSAGE(results[0].ok(), results[0].message);
      CHECK_MESSAGE(contains(results[1].message, "killed by signal 9"), results[1].message);
    }
  }
}
