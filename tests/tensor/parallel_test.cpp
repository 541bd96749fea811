// parallel_for and the thread count: coverage of every index, inline runs, nesting, exceptions,
// set/get_num_threads and OMP_NUM_THREADS. No check depends on timing; where two threads must meet,
// the wait is bounded only so that a broken pool fails instead of hanging.
#include "tensor/parallel.h"

#include <sched.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <doctest/doctest.h>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;

namespace {

// Restores the thread count a test changed.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

// Sets or unsets an environment variable for one scope.
struct EnvGuard {
  std::string name;
  std::string saved;
  bool had;
  EnvGuard(const char* n, const char* value) : name(n) {
    const char* v = getenv(n);
    had = v != nullptr;
    if (had) saved = v;
    if (value) setenv(n, value, 1);
    else unsetenv(n);
  }
  ~EnvGuard() {
    if (had) setenv(name.c_str(), saved.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("parallel_for visits every index exactly once, in chunks of at least the grain") {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3, 4, 7}) {
    set_num_threads(threads);
    for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 0}, {5, 3}, {0, 1}, {0, 2}, {-7, 9}, {0, 10}, {3, 103}, {0, 1000}, {100, 4197}}) {
      for (int64_t grain : {0, 1, 2, 3, 7, 64, 1000, 100000}) {
        CAPTURE(threads);
        CAPTURE(begin);
        CAPTURE(end);
        CAPTURE(grain);
        int64_t n = std::max<int64_t>(end - begin, 0);
        std::vector<std::atomic<int>> seen(n);
        std::atomic<int> calls{0}, short_chunks{0};
        parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
          calls++;
          if (e - b < grain && !(b == begin && e == end)) short_chunks++;
          for (int64_t i = b; i < e; ++i) seen[i - begin]++;
        });
        for (int64_t i = 0; i < n; ++i) REQUIRE(seen[i] == 1);
        CHECK(short_chunks == 0);
        CHECK(calls <= std::max(threads, 1));
        if (n == 0) CHECK(calls == 0);
      }
    }
  }
}

TEST_CASE("parallel_for runs a range below the grain, or with one thread, as one call on the caller") {
  ThreadsGuard guard;
  auto me = std::this_thread::get_id();
  for (int threads : {1, 4}) {
    set_num_threads(threads);
    int64_t grain = threads == 1 ? 1 : 1000;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    bool on_caller = true, in_region = true;
    parallel_for(10, 999 + 10 * (threads == 1), grain, [&](int64_t b, int64_t e) {
      chunks.emplace_back(b, e);  // not synchronised: must be the only call
      on_caller = on_caller && std::this_thread::get_id() == me;
      in_region = in_region && in_parallel_region();
    });
    REQUIRE(chunks.size() == 1);
    CHECK(chunks[0].first == 10);
    CHECK(on_caller);
    CHECK_FALSE(in_region);  // inline runs are not a parallel region: nothing to protect
  }
}

TEST_CASE("two chunks run at once on two threads") {
  ThreadsGuard guard;
  set_num_threads(2);
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::thread::id> inside;
  bool met = false;
  parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    std::unique_lock<std::mutex> lk(mu);
    inside.insert(std::this_thread::get_id());
    cv.notify_all();
    // The caller cannot take the second chunk while it waits here, so a worker must.
    met = cv.wait_for(lk, std::chrono::seconds(60), [&] { return inside.size() == 2; }) || met;
  });
  CHECK(met);
  CHECK(inside.size() == 2);
}

TEST_CASE("nested parallel_for runs inline on the thread of the outer chunk") {
  ThreadsGuard guard;
  set_num_threads(4);
  constexpr int64_t R = 37, C = 53;
  std::vector<std::atomic<int>> seen(R * C);
  std::atomic<int> inner_off_thread{0}, outer_not_in_region{0};
  parallel_for(0, R, 1, [&](int64_t r0, int64_t r1) {
    if (!in_parallel_region()) outer_not_in_region++;
    auto outer = std::this_thread::get_id();
    for (int64_t r = r0; r < r1; ++r)
      parallel_for(0, C, 1, [&](int64_t c0, int64_t c1) {
        if (std::this_thread::get_id() != outer) inner_off_thread++;
        for (int64_t c = c0; c < c1; ++c) seen[r * C + c]++;
      });
  });
  for (auto& s : seen) REQUIRE(s == 1);
  CHECK(inner_off_thread == 0);
  CHECK(outer_not_in_region == 0);
  CHECK_FALSE(in_parallel_region());
}

TEST_CASE("an exception from any chunk reaches the caller, and the pool stays usable") {
  ThreadsGuard guard;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    CAPTURE(threads);
    // Every chunk throws, so whichever thread runs one, its exception must come back.
    CHECK_THROWS_AS(parallel_for(0, 1000, 1, [](int64_t b, int64_t) { throw std::out_of_range(std::to_string(b)); }),
                    std::out_of_range);
    CHECK(contains(error_of([] { parallel_for(0, 1000, 1, [](int64_t, int64_t) { fail("chunk failed"); }); }),
                   "chunk failed"));
    // Only the chunk holding index 999 throws: it may run on a worker or the caller.
    CHECK(contains(error_of([] {
            parallel_for(0, 1000, 1, [](int64_t, int64_t e) {
              if (e == 1000) fail("last chunk failed");
            });
          }),
          "last chunk failed"));
    std::atomic<int64_t> sum{0};
    parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    CHECK(sum == 999 * 1000 / 2);
    CHECK_FALSE(in_parallel_region());
  }
}

TEST_CASE("parallel_for from several threads at once") {
  ThreadsGuard guard;
  set_num_threads(3);
  std::vector<std::thread> users;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    users.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> seen(777);
        parallel_for(0, 777, 10, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) seen[i]++;
        });
        for (auto& s : seen) wrong += s != 1;
      }
    });
  for (auto& u : users) u.join();
  CHECK(wrong == 0);
}

TEST_CASE("set_num_threads and get_num_threads") {
  ThreadsGuard guard;
  CHECK(get_num_threads() >= 1);
  set_num_threads(3);
  CHECK(get_num_threads() == 3);
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  CHECK(contains(error_of([] { set_num_threads(0); }), "set_num_threads: expected a number of threads in [1, "));
  CHECK(contains(error_of([] { set_num_threads(-2); }), "got -2"));
  CHECK(contains(error_of([] { set_num_threads(1 << 20); }), "got 1048576"));
  CHECK(get_num_threads() == 1);
  CHECK(contains(error_of([] { parallel_for(0, 10, -1, [](int64_t, int64_t) {}); }), "grain must be >= 0, got -1"));
  // Growing and shrinking the pool between calls.
  for (int threads : {4, 2, 5, 1, 3}) {
    set_num_threads(threads);
    std::atomic<int64_t> n{0};
    parallel_for(0, 100, 1, [&](int64_t b, int64_t e) { n += e - b; });
    CHECK(n == 100);
  }
}

TEST_CASE("the default thread count: OMP_NUM_THREADS, else the cores this process may use") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  const int cores = CPU_COUNT(&set);
  {
    EnvGuard env("OMP_NUM_THREADS", nullptr);
    CHECK(default_num_threads() == cores);
  }
  {
    EnvGuard env("OMP_NUM_THREADS", "");
    CHECK(default_num_threads() == cores);
  }
  {
    EnvGuard env("OMP_NUM_THREADS", "1");
    CHECK(default_num_threads() == 1);
  }
  {
    EnvGuard env("OMP_NUM_THREADS", "13");
    CHECK(default_num_threads() == 13);
  }
  for (const char* bad : {"two", "4,2", " 3", "3 ", "1.5"}) {
    EnvGuard env("OMP_NUM_THREADS", bad);
    CAPTURE(bad);
    CHECK(contains(error_of([] { default_num_threads(); }), "OMP_NUM_THREADS"));
    CHECK(contains(error_of([] { default_num_threads(); }), "is not an integer"));
  }
  for (const char* bad : {"0", "-1"}) {
    EnvGuard env("OMP_NUM_THREADS", bad);
    CHECK(contains(error_of([] { default_num_threads(); }), "is out of range"));
  }
}
