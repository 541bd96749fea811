// The CPU process groups' work queue (distributed/work_queue.h), in one process: issue order, where a
// blocking call runs, and the failure rule. Threads meet through latches, never sleeps; deadlines are
// hang guards.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "distributed/work_queue.h"

using namespace lockstep;
using namespace lockstep::dist;
using std::chrono::seconds;

namespace {

WorkQueue::Options options() {
  WorkQueue::Options o;
  o.owner = "TestGroup";
  o.rank = 1;
  o.size = 2;
  return o;
}

std::string error_of(const std::shared_ptr<Work>& work) {
  try {
    work->wait(std::chrono::milliseconds(60'000));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a blocking call issued while async work is queued waits its turn, behind it, on the worker") {
  WorkQueue queue(options());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::mutex mu;
  std::vector<std::string> order;
  std::thread::id first_thread, second_thread;
  auto first = queue.submit({"all_reduce"}, [&](uint32_t) {
    released.wait();
    std::lock_guard lock(mu);
    order.push_back("first");
    first_thread = std::this_thread::get_id();
  }, /*async_op=*/true);
  // Blocking, but the first is still running: it must queue behind it, not run here and now.
  auto blocking = std::async(std::launch::async, [&] {
    return queue.submit({"barrier"}, [&](uint32_t) {
      std::lock_guard lock(mu);
      order.push_back("second");
      second_thread = std::this_thread::get_id();
    }, /*async_op=*/false);
  });
  // submit returns at once for a queued blocking call: its Work is not finished until the first is.
  std::shared_ptr<Work> second = blocking.get();
  CHECK_FALSE(first->is_completed());
  CHECK_FALSE(second->is_completed());
  release.set_value();
  second->wait(std::chrono::milliseconds(60'000));
  CHECK(first->is_completed());
  REQUIRE(order == std::vector<std::string>{"first", "second"});
  CHECK(first_thread == second_thread);  // both on the worker
  CHECK(first->seq() == 1);
  CHECK(second->seq() == 2);
}

TEST_CASE("once a waited Work finishes, the next blocking call runs on the caller's own thread") {
  // The worker is idle before it finishes a Work: a blocking call issued by the waiter right after its
  // wait finds nothing queued or running, so it runs on the caller's thread. Deterministic, every time.
  WorkQueue queue(options());
  for (int i = 0; i < 200; ++i) {
    std::thread::id ran_on;
    auto async = queue.submit({"all_reduce"}, [&](uint32_t) {}, /*async_op=*/true);
    async->wait();
    auto blocking = queue.submit({"all_reduce"}, [&](uint32_t) { ran_on = std::this_thread::get_id(); }, false);
    REQUIRE(blocking->is_completed());
    REQUIRE(ran_on == std::this_thread::get_id());
  }
}

TEST_CASE("tags follow the sequence numbers, alike on every rank") {
  WorkQueue queue(options());
  std::vector<uint32_t> tags;
  for (int i = 0; i < 5; ++i) queue.submit({"barrier"}, [&](uint32_t tag) { tags.push_back(tag); }, i % 2 == 0);
  queue.submit({"barrier"}, [](uint32_t) {}, true)->wait();
  CHECK(tags == std::vector<uint32_t>{1, 2, 3, 4, 5});
}

TEST_CASE("a failed collective fails every later one, naming the first error") {
  WorkQueue queue(options());
  auto failed = queue.submit({"all_reduce", Dtype::Float32, 10, "SUM"},
                             [](uint32_t) { throw Error("lost connection to rank 0"); }, true);
  auto later = queue.submit({"broadcast", Dtype::Int64, 3, nullptr, 0}, [](uint32_t) { FAIL("must not run"); }, false);
  CHECK(error_of(failed) ==
        "TestGroup: all_reduce (float32, 10 elements, SUM) failed on rank 1 of 2: lost connection to rank 0");
  CHECK(error_of(later) == "TestGroup: broadcast (int64, 3 elements, root 0) not run: an earlier collective failed on "
                           "this group: all_reduce (float32, 10 elements, SUM): lost connection to rank 0");
}

TEST_CASE("destruction runs what is queued first") {
  std::atomic<int> ran{0};
  std::shared_ptr<Work> last;
  {
    WorkQueue queue(options());
    for (int i = 0; i < 10; ++i) last = queue.submit({"barrier"}, [&](uint32_t) { ++ran; }, true);
  }
  CHECK(ran == 10);
  CHECK(last->is_success());
}

TEST_CASE("a continuation runs on the worker before the Work reads finished, before the next collective; after it, "
          "on the caller; never after a failure") {
  WorkQueue queue(options());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::string> order;  // written by the worker only, until the waits below
  auto first = queue.submit({"all_reduce"}, [&](uint32_t) {
    released.wait();
    order.push_back("first");
  }, /*async_op=*/true);
  first->then([&] {
    CHECK_FALSE(first->is_completed());  // nobody sees the work done before its continuation ran
    order.push_back("then");
  });
  auto second = queue.submit({"barrier"}, [&](uint32_t) { order.push_back("second"); }, /*async_op=*/true);
  release.set_value();
  CHECK(error_of(second).empty());
  CHECK(order == std::vector<std::string>{"first", "then", "second"});

  // Registered after the work finished: runs here, at once.
  bool ran_here = false;
  first->then([&] { ran_here = true; });
  CHECK(ran_here);

  // A failed collective runs none; its error stands.
  auto failed = queue.submit({"all_reduce"}, [](uint32_t) { throw Error("peer lost"); }, /*async_op=*/false);
  bool ran_after_failure = false;
  failed->then([&] { ran_after_failure = true; });
  CHECK_FALSE(ran_after_failure);
  CHECK(error_of(failed).find("peer lost") != std::string::npos);

  // A continuation that throws fails its work, naming the collective.
  WorkQueue other(options());
  std::promise<void> go;
  std::shared_future<void> gone = go.get_future().share();
  auto w = other.submit({"reduce_scatter"}, [&](uint32_t) { gone.wait(); }, /*async_op=*/true);
  w->then([] { throw Error("divide failed"); });
  go.set_value();
  const std::string e = error_of(w);
  CHECK(e.find("reduce_scatter") != std::string::npos);
  CHECK(e.find("divide failed") != std::string::npos);
}
