// ProcessGroupGloo over loopback, one process per rank (tests/util/multiprocess.h), each group built on a
// FileStore in a fresh directory. Every collective, reduce op and dtype is checked against values
// worked out by hand: rank r contributes (r + 1) * s(i) at element i, with s(i) = 1 + i % 7, so
//   SUM = s W(W+1)/2, PRODUCT = s^W W!, MIN = s, MAX = W s, AVG = s (W+1)/2 (int64: truncated),
// for world sizes 1 to 4 and 0, 1, 7 and 2^20 + 3 elements (large enough for gloo's segmented ring).
// Then asynchronous work completing in order, barrier, timeouts, a dead peer, argument errors, and
// DirectMesh's handshake with stray connections: one that never says which rank it is, one whose hello
// is no rank (an HTTP probe), and a rank claimed twice.
#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distributed/gloo/direct_mesh.h"
#include "distributed/store/file_store.h"
#include "distributed/gloo/process_group_gloo.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tests/util/gloo_group.h"
#include "tests/util/multiprocess.h"
#include "tests/util/test_util.h"

namespace {

using lockstep::testing::error_of;
using lockstep::testing::thrown_by;
using lockstep::testing::expect_error;

using namespace lockstep;
using dist::ProcessGroupGloo;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout{10000};
const std::vector<int64_t> kSizes = {0, 1, 7, (1 << 20) + 3};
const std::vector<Dtype> kDtypes = {kFloat32, kFloat64, kInt64};
const std::vector<dist::ReduceOp> kOps = {dist::ReduceOp::SUM, dist::ReduceOp::AVG, dist::ReduceOp::MIN, dist::ReduceOp::MAX, dist::ReduceOp::PRODUCT};

// A fresh directory per test case (tests/util/test_util.h).
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("lockstep_pg_test") {}
};

// Runs fn(pg, rank) as `world_size` ranks, each with its own ProcessGroupGloo (tests/util/gloo_group.h),
// and checks that every rank succeeded.
void check_group(int world_size, const std::function<void(ProcessGroupGloo& pg, int rank)>& fn,
                 ProcessGroupGloo::Options options) {
  testing::GroupRun run;
  run.store_timeout = kTimeout;
  auto results = testing::run_group(world_size, options, fn, run);
  CHECK_MESSAGE(testing::all_ok(results), "world size ", world_size, ":", testing::failures(results));
}

void check_group(int world_size, const std::function<void(ProcessGroupGloo& pg, int rank)>& fn,
                 milliseconds pg_timeout = kTimeout) {
  ProcessGroupGloo::Options options;
  options.timeout = pg_timeout;
  check_group(world_size, fn, options);
}

// The collectives' values are checked over both transports between ranks of one host: shared
// memory (the default) and TCP.
void run_group_both(int world_size, const std::function<void(ProcessGroupGloo& pg, int rank)>& fn) {
  for (bool shm : {true, false}) {
    ProcessGroupGloo::Options options;
    options.timeout = kTimeout;
    options.shared_memory = shm;
    check_group(world_size, [&](ProcessGroupGloo& pg, int rank) {
      const std::string expected = shm && world_size > 1 ? "shm" : "tcp";
      RANK_CHECK(pg.transport() == expected, "transport ", pg.transport(), ", expected ", expected);
      fn(pg, rank);
    }, options);
  }
}

template <typename F>
Tensor filled(Dtype dtype, int64_t n, F value) {
  Tensor t = empty({n}, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(value(i));
  });
  return t;
}

// Throws naming the first element that differs from expected(i) (compared exactly).
template <typename F>
void expect_values(const Tensor& t, F expected, const std::string& what) {
  dispatch(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      T want = static_cast<T>(expected(i));
      RANK_CHECK(p[i] == want, what, " (", dtype_name(t.dtype()), ", ", t.numel(), " elements): element ", i, " is ",
                 +p[i], ", expected ", +want);
    }
  });
}

double s(int64_t i) { return 1 + i % 7; }

double factorial(int n) { return n <= 1 ? 1 : n * factorial(n - 1); }

// The reduction of (r + 1) * s over ranks r = 0..W-1.
double reduced(dist::ReduceOp op, Dtype dtype, int W, double s) {
  switch (op) {
    case dist::ReduceOp::SUM: return s * W * (W + 1) / 2;
    case dist::ReduceOp::PRODUCT: return std::pow(s, W) * factorial(W);
    case dist::ReduceOp::MIN: return s;
    case dist::ReduceOp::MAX: return W * s;
    case dist::ReduceOp::AVG:
      if (dtype == kInt64) return static_cast<double>(static_cast<int64_t>(s) * W * (W + 1) / 2 / W);
      return s * (W + 1) / 2;
  }
  return NAN;
}

std::string describe(const char* what, dist::ReduceOp op, int64_t n) {
  return lockstep::detail::str_cat(what, " ", reduce_op_name(op));
}

int count_entries(const char* dir) {
  int n = 0;
  DIR* d = ::opendir(dir);
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// The number of entries once it has come down to `expected`, or after a second. A joined thread can
// linger in /proc/self/task for a moment: pthread_join returns before the kernel has reaped it.
int settled_count(const char* dir, int expected) {
  int n = count_entries(dir);
  for (int i = 0; i < 100 && n > expected; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
    n = count_entries(dir);
  }
  return n;
}

// "main, gloo, ...": the names of this process's threads, for a failed thread count.
std::string thread_names() {
  std::string names;
  DIR* d = ::opendir("/proc/self/task");
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    names += (names.empty() ? "" : ", ") + name;
  }
  ::closedir(d);
  return names;
}

}  // namespace

TEST_CASE("all_reduce: every op and dtype, world sizes 1 to 4, 0 to 2^20+3 elements") {
  for (int W = 1; W <= 4; ++W) {
    run_group_both(W, [&](ProcessGroupGloo& pg, int rank) {
      RANK_CHECK(pg.rank() == rank && pg.size() == W && pg.backend_name() == "gloo");
      for (Dtype dtype : kDtypes) {
        for (int64_t n : kSizes) {
          for (dist::ReduceOp op : kOps) {
            Tensor t = filled(dtype, n, [&](int64_t i) { return (rank + 1) * s(i); });
            auto work = pg.all_reduce(t, op);
            work->wait();
            RANK_CHECK(work->is_completed() && work->is_success());
            expect_values(t, [&](int64_t i) { return reduced(op, dtype, W, s(i)); }, describe("all_reduce", op, n));
          }
        }
      }
      // Position-dependent values: a segment landing at the wrong offset cannot go unnoticed.
      const int64_t n = kSizes.back();
      Tensor t = filled(kFloat64, n, [&](int64_t i) { return i * 8.0 + rank; });
      pg.all_reduce(t)->wait();
      expect_values(t, [&](int64_t i) { return i * 8.0 * W + W * (W - 1) / 2; }, "all_reduce SUM of i * 8 + rank");
    });
  }
}

TEST_CASE("all_reduce: every algorithm leaves the same bits on every rank; the exchange folds in rank order") {
  using Algorithm = ProcessGroupGloo::Options::Algorithm;
  for (Algorithm algorithm :
       {Algorithm::kExchange, Algorithm::kRing, Algorithm::kGlooRing, Algorithm::kGlooBcube, Algorithm::kAuto}) {
    for (int W = 2; W <= 4; ++W) {
      ProcessGroupGloo::Options options;
      options.timeout = kTimeout;
      options.allreduce_algorithm = algorithm;
      options.shared_memory = false;  // the TCP algorithms (shm_test checks shared memory's bits)
      check_group(W, [&](ProcessGroupGloo& pg, int rank) {
        // Magnitudes from 1e-6 to 1e6 of both signs: float addition's result depends on the order.
        auto value = [](int r, int64_t i) {
          const uint64_t h = (static_cast<uint64_t>(i) * 2654435761u + static_cast<uint64_t>(r) * 40503u) % 1000003u;
          return static_cast<float>((h % 2 ? -1.0 : 1.0) * std::pow(10.0, static_cast<double>(h % 13) - 6.0) *
                                    (1.0 + static_cast<double>(h % 1000) / 1000.0));
        };
        for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{100003}}) {
          Tensor t = filled(kFloat32, n, [&](int64_t i) { return value(rank, i); });
          pg.all_reduce(t, dist::ReduceOp::SUM, /*async_op=*/false);
          std::vector<Tensor> all;
          for (int r = 0; r < W; ++r) all.push_back(zeros({n}));
          pg.all_gather(all, t)->wait();
          for (int r = 0; r < W; ++r) {
            RANK_CHECK(std::memcmp(all[r].data_ptr(), t.data_ptr(), t.nbytes()) == 0, "rank ", r,
                       " ended with other bits than this rank (", n, " elements, world ", W, ")");
          }
          if (algorithm != Algorithm::kExchange) continue;
          const float* got = t.data<float>();
          for (int64_t i = 0; i < n; ++i) {
            float fold = value(0, i);
            for (int r = 1; r < W; ++r) fold += value(r, i);
            RANK_CHECK(got[i] == fold, "element ", i, " is ", got[i], ", the rank-order fold is ", fold);
          }
        }
      }, options);
    }
  }
}

TEST_CASE("broadcast: every root and dtype") {
  for (int W = 1; W <= 4; ++W) {
    run_group_both(W, [&](ProcessGroupGloo& pg, int rank) {
      for (Dtype dtype : kDtypes) {
        for (int64_t n : kSizes) {
          for (int root = 0; root < W; ++root) {
            auto value = [&](int64_t i) { return (i % 65536) + 100000.0 * root; };
            Tensor t = rank == root ? filled(dtype, n, value) : filled(dtype, n, [](int64_t) { return -1; });
            pg.broadcast(t, root)->wait();
            expect_values(t, value, "broadcast from root " + std::to_string(root));
          }
        }
      }
    });
  }
}

TEST_CASE("all_gather: separate outputs, chunks of one tensor, and in place") {
  for (int W = 1; W <= 4; ++W) {
    run_group_both(W, [&](ProcessGroupGloo& pg, int rank) {
      for (Dtype dtype : kDtypes) {
        for (int64_t n : kSizes) {
          auto value = [](int r, int64_t i) { return r * 100000.0 + i % 50000; };
          Tensor input = filled(dtype, n, [&](int64_t i) { return value(rank, i); });
          auto check = [&](const std::vector<Tensor>& outputs, const char* how) {
            for (int r = 0; r < W; ++r) {
              expect_values(outputs[r], [&](int64_t i) { return value(r, i); },
                            lockstep::detail::str_cat("all_gather (", how, ") output ", r));
            }
          };
          std::vector<Tensor> separate;
          for (int r = 0; r < W; ++r) separate.push_back(full({n}, -1, dtype));
          pg.all_gather(separate, input)->wait();
          check(separate, "separate outputs");

          Tensor flat = full({n * W}, -1, dtype);
          std::vector<Tensor> chunks;
          for (int r = 0; r < W; ++r) chunks.push_back(internal::view_range(flat, r * n, {n}));
          pg.all_gather(chunks, input)->wait();
          check(chunks, "chunks");

          internal::fill_(flat, -1);
          internal::copy_(chunks[rank], input);
          pg.all_gather(chunks, chunks[rank])->wait();
          check(chunks, "in place");
        }
      }
    });
  }
}

TEST_CASE("reduce_scatter: every op and dtype") {
  for (int W = 1; W <= 4; ++W) {
    run_group_both(W, [&](ProcessGroupGloo& pg, int rank) {
      for (Dtype dtype : kDtypes) {
        for (int64_t n : kSizes) {
          // inputs[j] on rank r holds (r + 1) * s(i + j): rank j receives the reduction of its own
          // pattern. The inputs serve every op: the collective must leave them as they were.
          std::vector<Tensor> inputs, before;
          for (int j = 0; j < W; ++j) {
            inputs.push_back(filled(dtype, n, [&](int64_t i) { return (rank + 1) * s(i + j); }));
            before.push_back(internal::clone(inputs.back()));
          }
          for (dist::ReduceOp op : kOps) {
            Tensor output = full({n}, -1, dtype);
            pg.reduce_scatter(output, inputs, op)->wait();
            expect_values(output, [&](int64_t i) { return reduced(op, dtype, W, s(i + rank)); },
                          describe("reduce_scatter", op, n));
          }
          for (int j = 0; j < W; ++j) RANK_CHECK(internal::allclose(inputs[j], before[j], 0, 0), "input ", j, " was modified");
        }
      }
    });
  }
}

TEST_CASE("all_gather_into_tensor and reduce_scatter_tensor: flat buffers of any shape, world sizes 1 to 3") {
  for (int W = 1; W <= 3; ++W) {
    run_group_both(W, [&](ProcessGroupGloo& pg, int rank) {
      for (Dtype dtype : {kFloat32, kFloat64, kBFloat16}) {
        // Rank r's shard is [2, 3] holding r * 10 + i; the gathered buffer is [W * 6] in rank order.
        Tensor shard = filled(dtype, 6, [&](int64_t i) { return rank * 10.0 + i; });
        shard = internal::view(shard, {2, 3});
        Tensor gathered = full({W * 6}, -1, dtype);
        pg.all_gather_into_tensor(gathered, shard)->wait();
        expect_values(gathered, [&](int64_t i) { return (i / 6) * 10.0 + i % 6; }, "all_gather_into_tensor");

        // Rank r's input [W, 2, 2] holds (r + 1) * (i + 1); rank j receives the sum over ranks of chunk j.
        Tensor input = filled(dtype, W * 4, [&](int64_t i) { return (rank + 1) * (i + 1.0); });
        input = internal::view(input, {W, 2, 2});
        Tensor out = full({4}, -1, dtype);
        pg.reduce_scatter_tensor(out, input)->wait();
        const double ranks = W * (W + 1) / 2.0;
        expect_values(out, [&](int64_t i) { return ranks * (rank * 4 + i + 1.0); }, "reduce_scatter_tensor");
      }
      if (W == 2) {
        Tensor t = zeros({3});
        Tensor wrong = zeros({5});
        expect_error([&] { pg.all_gather_into_tensor(wrong, t); },
                     "all_gather_into_tensor: the output has 5 elements (shape [5]); expected world size 2 x 3");
        expect_error([&] { pg.reduce_scatter_tensor(t, wrong); },
                     "reduce_scatter_tensor: the input has 5 elements (shape [5]); expected world size 2 x 3");
        Tensor strided = internal::transpose(zeros({3, 2}));
        expect_error([&] { pg.all_gather_into_tensor(strided, t); }, "all_gather_into_tensor: the output must be contiguous");
        Tensor ints = zeros({6}, kInt64);
        expect_error([&] { pg.all_gather_into_tensor(ints, t); }, "the output is int64 on cpu but the per-rank tensor is float32");
      }
    });
  }
}

TEST_CASE("asynchronous all_reduces complete in issue order") {
  check_group(3, [&](ProcessGroupGloo& pg, int rank) {
    constexpr int kInFlight = 64;
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int k = 0; k < kInFlight; ++k) {
      // Sizes vary so that the ring's segment counts differ between consecutive collectives.
      tensors.push_back(filled(kFloat32, 1000 + 997 * k, [&](int64_t i) { return k + rank + (i % 3); }));
      works.push_back(pg.all_reduce(tensors.back()));
    }
    for (int k = kInFlight - 1; k >= 0; --k) {
      works[k]->wait();
      for (int j = 0; j < k; ++j) RANK_CHECK(works[j]->is_completed(), "work ", j, " not complete after work ", k);
      expect_values(tensors[k], [&](int64_t i) { return 3 * k + 3 + 3 * (i % 3); }, "in-flight all_reduce " + std::to_string(k));
    }
    for (int k = 1; k < kInFlight; ++k) RANK_CHECK(works[k]->seq() == works[k - 1]->seq() + 1);
  });
}

// CPU time of the calling thread: a collective run on it costs it the reductions; one run by the worker
// costs it only the wait.
double thread_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

TEST_CASE("blocking collectives (async_op false) run on the caller's thread when idle, in order otherwise") {
  check_group(2, [&](ProcessGroupGloo& pg, int rank) {
    const int64_t n = 1 << 22;  // 16 MiB of float32: the reductions take milliseconds of CPU
    Tensor big = filled(kFloat32, n, [&](int64_t i) { return rank + (i % 5); });
    pg.barrier(/*async_op=*/false);
    double before = thread_cpu_ms();
    auto work = pg.all_reduce(big, dist::ReduceOp::SUM, /*async_op=*/false);
    const double inline_ms = thread_cpu_ms() - before;
    RANK_CHECK(work->is_completed() && work->is_success(), "a blocking all_reduce returned before finishing");
    expect_values(big, [](int64_t i) { return 1 + 2 * (i % 5); }, "blocking all_reduce");
    before = thread_cpu_ms();
    pg.all_reduce(big, dist::ReduceOp::MAX)->wait();
    const double queued_ms = thread_cpu_ms() - before;
    RANK_CHECK(inline_ms > 4 * queued_ms, "the blocking all_reduce cost the caller ", inline_ms,
               " ms of CPU and the queued one ", queued_ms, " ms: it did not run on the caller's thread");

    // Blocking calls issued behind asynchronous ones wait their turn: every result is right, and the
    // asynchronous work is complete when a later blocking call returns.
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int k = 0; k < 12; ++k) {
      tensors.push_back(filled(kFloat32, 5000 + 3001 * k, [&](int64_t i) { return k + rank + (i % 3); }));
      works.push_back(pg.all_reduce(tensors.back(), dist::ReduceOp::SUM, /*async_op=*/k % 3 != 2));
      if (k % 3 == 2) {
        for (int j = 0; j <= k; ++j) RANK_CHECK(works[j]->is_completed(), "work ", j, " not complete after blocking ", k);
      }
    }
    for (int k = 0; k < 12; ++k) {
      works[k]->wait();
      expect_values(tensors[k], [&](int64_t i) { return 2 * k + 1 + 2 * (i % 3); }, "mixed all_reduce " + std::to_string(k));
    }
    for (int k = 1; k < 12; ++k) RANK_CHECK(works[k]->seq() == works[k - 1]->seq() + 1);

    // Every collective has a blocking form.
    Tensor b = full({4}, rank == 1 ? 7.0 : 0.0);
    pg.broadcast(b, 1, /*async_op=*/false);
    expect_values(b, [](int64_t) { return 7; }, "blocking broadcast");
    std::vector<Tensor> gathered = {zeros({2}), zeros({2})};
    pg.all_gather(gathered, full({2}, rank + 1.0), /*async_op=*/false);
    expect_values(gathered[1], [](int64_t) { return 2; }, "blocking all_gather");
    Tensor out = zeros({2});
    std::vector<Tensor> inputs = {full({2}, 1.0), full({2}, 10.0)};
    pg.reduce_scatter(out, inputs, dist::ReduceOp::SUM, /*async_op=*/false);
    expect_values(out, [&](int64_t) { return rank == 0 ? 2 : 20; }, "blocking reduce_scatter");
  });
}

TEST_CASE("barrier waits for every rank") {
  check_group(3, [&](ProcessGroupGloo& pg, int rank) {
    pg.barrier()->wait();  // everyone is here: start the clocks together
    auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(milliseconds(150 * rank));
    pg.barrier()->wait();
    auto waited = std::chrono::steady_clock::now() - start;
    RANK_CHECK(waited >= milliseconds(250), "the barrier returned after ",
               std::chrono::duration_cast<milliseconds>(waited).count(), " ms, before rank 2 (300 ms) arrived");
  });
}

TEST_CASE("zero-element collectives complete immediately, even with no peer taking part") {
  check_group(2, [&](ProcessGroupGloo& pg, int rank) {
    if (rank == 1) return;
    Tensor empty_t = zeros({0});
    RANK_CHECK(pg.all_reduce(empty_t)->is_completed());
    RANK_CHECK(pg.broadcast(empty_t, 1)->is_completed());
    std::vector<Tensor> outs = {zeros({0}), zeros({0})};
    RANK_CHECK(pg.all_gather(outs, empty_t)->is_completed());
    RANK_CHECK(pg.reduce_scatter(empty_t, outs)->is_completed());
  });
}

TEST_CASE("two groups on one store do not mix their keys or their traffic") {
  TempDir dir;
  auto results = testing::run_ranks(2, [&](int rank) {
    auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 2, kTimeout);
    ProcessGroupGloo a(store, rank, 2, kTimeout);
    ProcessGroupGloo b(store, rank, 2, kTimeout);
    Tensor x = full({5}, rank + 1.0), y = full({5}, 10.0 * (rank + 1));
    auto wb = b.all_reduce(y, dist::ReduceOp::MAX);
    auto wa = a.all_reduce(x);
    wa->wait();
    wb->wait();
    expect_values(x, [](int64_t) { return 3; }, "group a");
    expect_values(y, [](int64_t) { return 20; }, "group b");
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("a collective that times out fails its Work, and the group refuses later collectives") {
  check_group(
      2,
      [&](ProcessGroupGloo& pg, int rank) {
        if (rank == 1) {
          std::this_thread::sleep_for(milliseconds(1500));  // never joins the all_reduce
          return;
        }
        Tensor t = ones({100});
        auto start = std::chrono::steady_clock::now();
        std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
        auto took = std::chrono::steady_clock::now() - start;
        RANK_CHECK(message.find("all_reduce (float32, 100 elements, SUM) failed on rank 0 of 2") != std::string::npos,
                   message);
        RANK_CHECK(took < milliseconds(1400), "the timeout of 0.5s took ",
                   std::chrono::duration_cast<milliseconds>(took).count(), " ms");
        message = error_of([&] { pg.barrier()->wait(); });
        RANK_CHECK(message.find("an earlier collective failed") != std::string::npos, message);
        message = error_of([&] { pg.all_reduce(t, dist::ReduceOp::SUM, /*async_op=*/false); });
        RANK_CHECK(message.find("an earlier collective failed") != std::string::npos, message);
      },
      milliseconds(500));
}

TEST_CASE("a peer that dies mid-job makes the collective fail instead of hanging") {
  check_group(2, [&](ProcessGroupGloo& pg, int rank) {
    pg.barrier()->wait();
    if (rank == 1) ::_exit(0);  // gone without a word: its sockets close
    Tensor t = ones({1000});
    auto start = std::chrono::steady_clock::now();
    std::string message = error_of([&] { pg.all_reduce(t)->wait(); });
    RANK_CHECK(message.find("all_reduce") != std::string::npos, message);
    RANK_CHECK(std::chrono::steady_clock::now() - start < kTimeout / 2, "noticed the dead peer only at the timeout");
  });
}

TEST_CASE("Work::wait with a timeout gives up while the collective waits for a late peer") {
  check_group(2, [&](ProcessGroupGloo& pg, int rank) {
    Tensor t = full({10}, rank + 1.0);
    if (rank == 1) std::this_thread::sleep_for(milliseconds(600));
    auto work = pg.all_reduce(t);
    if (rank == 0) {
      std::string message = error_of([&] { work->wait(milliseconds(100)); });
      RANK_CHECK(message.find("did not complete within 0.1s") != std::string::npos, message);
      RANK_CHECK(!work->is_completed());
    }
    work->wait();
    expect_values(t, [](int64_t) { return 3; }, "late all_reduce");
  });
}

TEST_CASE("destroying a group leaves no thread or socket behind") {
  TempDir dir;
  auto results = testing::run_ranks(2, [&](int rank) {
    auto store = std::make_shared<dist::FileStore>(dir.path + "/store", -1, kTimeout);
    // A thread started and joined first: a runtime that starts a thread of its own at a process's
    // first pthread_create (ThreadSanitizer's background thread) has it in the count before.
    std::thread([] {}).join();
    const int threads = settled_count("/proc/self/task", 1), fds = count_entries("/proc/self/fd");
    for (int round = 0; round < 3; ++round) {
      auto pg = std::make_unique<ProcessGroupGloo>(store, rank, 2, kTimeout);
      Tensor t = ones({1000});
      auto work = pg->all_reduce(t);  // still queued or running when the group is destroyed
      pg.reset();
      RANK_CHECK(work->is_completed(), "destruction did not finish the queued all_reduce");
      expect_values(t, [](int64_t) { return 2; }, "all_reduce before destruction");
      const int threads_now = settled_count("/proc/self/task", threads), fds_now = settled_count("/proc/self/fd", fds);
      RANK_CHECK(threads_now == threads, "round ", round, ": ", threads_now, " threads, ", threads, " before: ",
                 thread_names());
      RANK_CHECK(fds_now == fds, "round ", round, ": ", fds_now, " open files, ", fds, " before");
    }
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

TEST_CASE("argument errors name the collective and the offending values") {
  check_group(2, [&](ProcessGroupGloo& pg, int rank) {
    Tensor t = zeros({3});
    std::vector<Tensor> one = {zeros({3})};
    expect_error([&] { pg.all_gather(one, t); }, "all_gather: expected one output tensor per rank (2), got 1");
    std::vector<Tensor> sizes = {zeros({3}), zeros({4})};
    expect_error([&] { pg.all_gather(sizes, t); }, "all_gather: outputs[1] has shape [4] but the input has shape [3]");
    std::vector<Tensor> dtypes = {zeros({3}), zeros({3}, kInt64)};
    expect_error([&] { pg.all_gather(dtypes, t); }, "all_gather: outputs[1] is int64 but the input is float32");
    std::vector<Tensor> undefined = {zeros({3}), Tensor()};
    expect_error([&] { pg.all_gather(undefined, t); }, "all_gather: outputs is an undefined tensor");
    expect_error([&] { pg.reduce_scatter(t, sizes); }, "reduce_scatter: inputs[1] has shape [4] but the output has shape [3]");
    expect_error([&] { pg.reduce_scatter(t, one); }, "reduce_scatter: expected one input tensor per rank (2), got 1");
    expect_error([&] { pg.broadcast(t, 2); }, "broadcast: root 2 is out of range for world size 2");
    expect_error([&] { pg.broadcast(t, -1); }, "broadcast: root -1 is out of range");
    Tensor none;
    expect_error([&] { pg.all_reduce(none); }, "all_reduce: the tensor is an undefined tensor");
    // The group is still usable: checks run before anything is queued.
    Tensor x = full({4}, rank + 1.0);
    pg.all_reduce(x)->wait();
    expect_values(x, [](int64_t) { return 3; }, "all_reduce after the errors");

    // The ranks are checked before the store is used.
    expect_error([&] { ProcessGroupGloo bad(nullptr, 2, 2, kTimeout); }, "rank 2 is out of range for world size 2");
    expect_error([&] { ProcessGroupGloo bad(nullptr, 0, 0, kTimeout); }, "world size must be at least 1, got 0");
    expect_error([&] { ProcessGroupGloo bad(nullptr, 0, 1, kTimeout); }, "ProcessGroupGloo: the store is null");
  });
}

TEST_CASE("gloo listens where it is told: a hostname, GLOO_SOCKET_IFNAME, or the route to MASTER_ADDR") {
  TempDir dir;
  auto results = testing::run_ranks(2, [&](int rank) {
    auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 2, kTimeout);
    auto check_works = [&](ProcessGroupGloo& pg) {
      Tensor t = full({3}, rank + 1.0);
      pg.all_reduce(t)->wait();
      expect_values(t, [](int64_t) { return 3; }, "all_reduce on " + pg.address());
    };
    dist::GlooOptions by_name;
    by_name.timeout = kTimeout;
    by_name.hostname = "localhost";
    ProcessGroupGloo a(store, rank, 2, by_name);
    check_works(a);
    ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
    ProcessGroupGloo b(store, rank, 2, kTimeout);
    check_works(b);
    ::unsetenv("GLOO_SOCKET_IFNAME");
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ProcessGroupGloo c(store, rank, 2, kTimeout);
    RANK_CHECK(c.address().find("127.0.0.1") != std::string::npos, "listening on ", c.address());
    check_works(c);
  });
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

// DirectMesh's handshake (the mesh behind small all-reduces and barriers), with ranks as threads
// sharing a FileStore and connections to rank 0's mesh listener that never say which rank they are
// (a hung peer, or a stray client such as a port scanner) or say something that is no rank.
namespace {

// Connects to rank `rank`'s mesh listener once it is published under "direct_mesh/<rank>", and sends nothing.
dist::Socket silent_connection(const std::string& store_path, int rank) {
  dist::FileStore store(store_path, -1, kTimeout);
  const std::string key = "direct_mesh/" + std::to_string(rank);
  store.wait({key}, kTimeout);
  const auto [host, port] = dist::split_host_port(store.get_string(key), key);
  return dist::Socket::connect(host, port, lockstep::deadline_after(kTimeout));
}

// Connects to rank `rank`'s mesh listener and sends `hello` (a DirectMesh hello is the rank as an int32).
dist::Socket connection_saying(const std::string& store_path, int rank, const void* hello, size_t bytes) {
  dist::Socket s = silent_connection(store_path, rank);
  s.send_all(hello, bytes, lockstep::deadline_after(kTimeout));
  return s;
}

// Whether the other end closes `s` within kTimeout (what it sent may be unread: then a reset).
bool closed_by_peer(const dist::Socket& s) {
  const auto deadline = lockstep::deadline_after(kTimeout);
  for (;;) {
    pollfd fd{s.fd(), POLLIN, 0};
    const int rc = ::poll(&fd, 1, dist::remaining_ms(deadline));
    if (rc == 0) return false;
    if (rc < 0) continue;  // EINTR
    char c;
    const ssize_t n = ::recv(s.fd(), &c, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    REQUIRE(n < 0);  // DirectMesh sends nothing before the handshake ends
  }
}

}  // namespace

TEST_CASE("DirectMesh: a connection that never says which rank it is holds up no rank") {
  TempDir dir;
  const std::string store_path = dir.path + "/store";
  constexpr milliseconds kMeshTimeout{5000};
  int32_t got[2] = {-1, -1};
  std::string errors[2];
  auto rank_fn = [&](int rank) {
    errors[rank] = thrown_by([&] {
      dist::FileStore store(store_path, -1, kTimeout);
      dist::DirectMesh mesh(store, rank, 2, "127.0.0.1", kMeshTimeout);
      const int32_t mine = 10 + rank;
      mesh.exchange(&mine, &got[rank], sizeof(mine), /*seq=*/1);
    });
  };
  const auto start = std::chrono::steady_clock::now();
  std::thread rank0(rank_fn, 0);
  dist::Socket silent = silent_connection(store_path, 0);  // before rank 1 connects
  std::thread rank1(rank_fn, 1);
  rank0.join();
  rank1.join();
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  CHECK(got[0] == 11);
  CHECK(got[1] == 10);
  CHECK(testing::seconds_since(start) < 2.5);  // not held until the 5 s deadline
}

TEST_CASE("DirectMesh: a connection whose hello is no rank is closed and holds up no rank") {
  // Before rank 1 starts: an HTTP probe ("GET " reads as rank 542393671) that sends and closes, then
  // one that claims rank 99 of 2 and stays until rank 0 closes it. Then an all-reduce (SUM by
  // exchange, as ProcessGroupGloo's small all-reduce does) over the mesh.
  TempDir dir;
  const std::string store_path = dir.path + "/store";
  constexpr milliseconds kMeshTimeout{5000};
  int32_t sums[2][3] = {};
  std::string errors[2];
  auto rank_fn = [&](int rank) {
    errors[rank] = thrown_by([&] {
      dist::FileStore store(store_path, -1, kTimeout);
      dist::DirectMesh mesh(store, rank, 2, "127.0.0.1", kMeshTimeout);
      const int32_t mine[3] = {rank + 1, 10 * (rank + 1), -7 * (rank + 1)};
      int32_t theirs[3] = {};
      mesh.exchange(mine, theirs, sizeof(mine), /*seq=*/1);
      for (int i = 0; i < 3; ++i) sums[rank][i] = mine[i] + theirs[i];
    });
  };
  const auto start = std::chrono::steady_clock::now();
  std::thread rank0(rank_fn, 0);
  bool dropped = false;
  const std::string stray_error = thrown_by([&] {  // before the fix, rank 0 failed, so the second could not connect
    const std::string http = "GET / HTTP/1.0\r\n\r\n";
    connection_saying(store_path, 0, http.data(), http.size()).close();
    const int32_t rank99 = 99;
    dist::Socket claims_99 = connection_saying(store_path, 0, &rank99, sizeof(rank99));
    dropped = closed_by_peer(claims_99);  // rank 0 read its hello and closed it
  });
  CHECK(stray_error == "");
  CHECK(dropped);
  std::thread rank1(rank_fn, 1);
  rank0.join();
  rank1.join();
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(sums[rank][0] == 3);
    CHECK(sums[rank][1] == 30);
    CHECK(sums[rank][2] == -21);
  }
  CHECK(testing::seconds_since(start) < 2.5);  // not held until the 5 s deadline
}

TEST_CASE("DirectMesh: a rank claimed by two connections fails the handshake at once") {
  // World size 3, rank 0 alone: two connections both say they are rank 1.
  TempDir dir;
  const std::string store_path = dir.path + "/store";
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  std::thread rank0([&] {
    error = thrown_by([&] {
      dist::FileStore store(store_path, -1, kTimeout);
      dist::DirectMesh mesh(store, 0, 3, "127.0.0.1", milliseconds(5000));
    });
  });
  const int32_t rank1 = 1;
  dist::Socket first = connection_saying(store_path, 0, &rank1, sizeof(rank1));
  dist::Socket second = connection_saying(store_path, 0, &rank1, sizeof(rank1));
  rank0.join();
  CHECK(testing::contains(error, "DirectMesh: rank 0 got two connections claiming to be rank 1, from 127.0.0.1:"));
  CHECK(testing::contains(error, "127.0.0.1:" + std::to_string(first.local_port())));
  CHECK(testing::contains(error, "127.0.0.1:" + std::to_string(second.local_port())));
  CHECK(testing::seconds_since(start) < 2.5);  // not at the 5 s deadline
}

TEST_CASE("DirectMesh: when the handshake times out, the error names the ranks that never said who they are") {
  // World size 3: rank 1 never starts, rank 2 connects and says so, and first come a silent connection
  // and one that claims rank 7.
  TempDir dir;
  const std::string store_path = dir.path + "/store";
  std::string errors[3];
  auto rank_fn = [&](int rank) {
    errors[rank] = thrown_by([&] {
      dist::FileStore store(store_path, -1, kTimeout);
      try {
        dist::DirectMesh mesh(store, rank, 3, "127.0.0.1", milliseconds(2000));
      } catch (const lockstep::TimeoutError& e) {
        throw std::runtime_error(std::string("TimeoutError: ") + e.what());
      }
    });
  };
  std::thread rank0(rank_fn, 0);
  dist::Socket silent = silent_connection(store_path, 0);
  const int32_t rank7 = 7;
  dist::Socket claims_7 = connection_saying(store_path, 0, &rank7, sizeof(rank7));
  CHECK(closed_by_peer(claims_7));
  std::thread rank2(rank_fn, 2);
  rank0.join();
  rank2.join();
  CHECK(errors[0] == "TimeoutError: DirectMesh: rank 0 timed out after 2s waiting for rank(s) 1 to connect (1 "
                     "connection from 127.0.0.1:" + std::to_string(silent.local_port()) +
                     " never said which rank it is; 1 connection from 127.0.0.1:" +
                     std::to_string(claims_7.local_port()) + " sent an invalid hello)");
  CHECK(testing::contains(errors[2], "direct_mesh/1"));  // rank 2 connected to rank 0, then waited for rank 1
}

TEST_CASE("all_reduce MAX and MIN: a NaN on one rank is NaN on every rank, on every transport and algorithm") {
  using Algorithm = ProcessGroupGloo::Options::Algorithm;
  auto check = [](ProcessGroupGloo& pg, int rank) {
    // Element 0: NaN on the last rank only; element 1: NaN on rank 0 only; element 2: no NaN.
    const int last = pg.size() - 1;
    for (dist::ReduceOp op : {dist::ReduceOp::MAX, dist::ReduceOp::MIN}) {
      for (Dtype dtype : {kFloat32, kFloat64}) {
        Tensor t = filled(dtype, 3, [&](int64_t i) {
          if ((i == 0 && rank == last) || (i == 1 && rank == 0)) return std::nan("");
          return static_cast<double>(rank + 1);
        });
        pg.all_reduce(t, op, /*async_op=*/false);
        double got[3];
        for (int64_t i = 0; i < 3; ++i) got[i] = dtype == kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
        RANK_CHECK(std::isnan(got[0]), reduce_op_name(op), " ", dtype_name(dtype), ": NaN on rank ", last,
                   " gave ", got[0]);
        RANK_CHECK(std::isnan(got[1]), reduce_op_name(op), " ", dtype_name(dtype), ": NaN on rank 0 gave ", got[1]);
        const double expected = op == dist::ReduceOp::MAX ? pg.size() : 1;
        RANK_CHECK(got[2] == expected, reduce_op_name(op), ": ", got[2], ", expected ", expected);
      }
    }
  };
  for (int W : {2, 3}) run_group_both(W, check);
  for (Algorithm algorithm : {Algorithm::kExchange, Algorithm::kRing, Algorithm::kGlooRing, Algorithm::kGlooBcube}) {
    ProcessGroupGloo::Options options;
    options.timeout = kTimeout;
    options.allreduce_algorithm = algorithm;
    options.shared_memory = false;
    check_group(3, check, options);
  }
}

TEST_CASE("LOCKSTEP_DISTRIBUTED_DEBUG=INFO: rank 0 names the transport the group chose and what runs each collective") {
  for (bool shm : {true, false}) {
    TempDir dir;
    const std::string log = dir.path + "/stderr";
    auto results = testing::run_ranks(2, [&](int rank) {
      ::setenv("LOCKSTEP_DISTRIBUTED_DEBUG", "INFO", 1);
      const int saved = ::dup(2);
      const int fd = ::open((log + std::to_string(rank)).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::close(fd);
      {
        auto store = std::make_shared<dist::FileStore>(dir.path + "/store", 2, kTimeout);
        ProcessGroupGloo::Options options;
        options.timeout = kTimeout;
        options.shared_memory = shm;
        ProcessGroupGloo pg(store, rank, 2, options);
      }
      ::dup2(saved, 2);
      ::close(saved);
      std::ifstream in(log + std::to_string(rank));
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      // Shared memory adds whether large all-gathers and reduce-scatters read the others' memory directly,
      // which depends on the host's kernel policy (shm_group.h).
      const std::string expected =
          shm ? "ProcessGroupGloo: transport shm on 2 ranks: all five collectives through shared memory (ShmGroup)"
              : "ProcessGroupGloo: transport tcp on 2 ranks: all_reduce exchange or ring by size, barrier, "
                "all_gather_into_tensor and reduce_scatter_tensor (ring) on DirectMesh; broadcast and the per-chunk "
                "all_gather and reduce_scatter on gloo's TCP pairs\n";
      if (rank == 0) {
        RANK_CHECK(text.find(expected) != std::string::npos, "stderr: \"", text, "\"");
      } else {
        RANK_CHECK(text.find("ProcessGroupGloo: transport") == std::string::npos, "rank 1 logged: \"", text, "\"");
      }
    });
    CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
  }
}
