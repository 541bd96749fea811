// Work: the handle a collective returns (c10d's Work). Collectives are asynchronous: the call queues
// the operation and returns at once; wait() blocks until it has finished and rethrows its error.
// A process group completes its work in the order it was issued.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

namespace lockstep::dist {

// How all_reduce and reduce_scatter combine the ranks' tensors. AVG is the sum divided by the world
// size (truncating for int64, as NCCL's ncclAvg).
enum class ReduceOp : uint8_t { SUM, AVG, MIN, MAX, PRODUCT };

const char* reduce_op_name(ReduceOp op);  // "SUM", "AVG", ...
inline std::ostream& operator<<(std::ostream& os, ReduceOp op) { return os << reduce_op_name(op); }

// Work::wait's "no timeout of its own": the backend's collective timeout still applies.
inline constexpr std::chrono::milliseconds kNoTimeout{0};

// A collective's completion and outcome. The base class is a one-shot completion flag that a backend's
// worker sets with finish(); backends whose completion lives elsewhere (a CUDA event) override the
// virtual methods. Thread-safe.
class Work {
 public:
  // `op` names the collective in errors, e.g. "all_reduce"; `seq` is its position in the group's order.
  Work(std::string op, uint64_t seq) : op_(std::move(op)), seq_(seq) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the collective has finished, then rethrows its error (a lockstep::Error naming the
  // op). With a timeout, gives up after that long with lockstep::TimeoutError; the collective itself
  // keeps running under the group's own timeout.
  virtual void wait(std::chrono::milliseconds timeout = kNoTimeout);
  // True once the collective has finished, successfully or not. Never blocks.
  virtual bool is_completed();
  // True once the collective has finished without error.
  virtual bool is_success();
  // The collective's error; null while running or after success.
  virtual std::exception_ptr exception();

  const std::string& op() const { return op_; }
  uint64_t seq() const { return seq_; }

  // Marks the work finished (with `error` when it failed) and wakes waiters, after running (on success) the
  // continuations not yet run. Called once, by the backend.
  void finish(std::exception_ptr error = nullptr);

  // Runs `fn` after the collective has succeeded and before anyone waiting sees it finished: what every
  // backend would otherwise repeat after the data has moved (ProcessGroup divides for AVG this way). It
  // runs on the backend's thread, or here on the caller's when the collective has already got that far;
  // it never runs after a failure. An exception from it fails the work.
  void then(std::function<void()> fn);
  // Runs the continuations registered so far; those registered later run in then(). A backend calls it
  // on its own thread right after the collective's data has moved (WorkQueue does), so the next
  // collective in the group's order already sees the result; finish() covers a backend that does not.
  void run_continuations();

 protected:
  const std::string op_;
  const uint64_t seq_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool completed_ = false;
  std::exception_ptr error_;
  std::vector<std::function<void()>> continuations_;
  bool continuations_ran_ = false;  // then() runs its function itself from here on
};

}  // namespace lockstep::dist
