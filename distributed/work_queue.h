// WorkQueue: the order in which a CPU process group (gloo, mpi) runs its collectives, and the thread
// that runs them.
//
//   WorkQueue queue({.owner = "ProcessGroupGloo", .rank = rank, .size = size});
//   return queue.submit({"all_reduce", t.dtype(), t.numel(), "SUM"}, [=](uint32_t tag) { ... }, async_op);
//
// Contract:
//   - Collectives run one at a time, in the order they were submitted, and their Works finish in that
//     order. Each gets the next sequence number (Work::seq(), from 1) and, as `tag`, its low 32 bits:
//     every rank submits its collectives in the same order, so the tags match across ranks.
//   - submit(async_op true) queues the collective for the worker thread and returns at once.
//   - submit(async_op false) runs the collective on the caller's thread when nothing is queued or
//     running (no thread hand-off: what a small blocking all-reduce costs), and returns its finished
//     Work. A blocking call issued while earlier work is queued or running waits its turn: it is queued
//     behind that work like an async one (the caller then waits on its Work).
//   - The worker marks itself idle before it finishes a Work, so a waiter woken by that Work that
//     submits a blocking call next finds the queue idle and runs it on its own thread. (Finishing first
//     let every blocking call after an async one find the worker still busy and queue in turn.)
//   - A collective that throws fails its Work with "<owner>: <what> failed on rank R of N: <error>",
//     and leaves the queue failed: every later collective fails at once with "<owner>: <what> not run:
//     an earlier collective failed on this group: <the first error>".
//   - Destruction runs every queued collective, then stops the worker. Submitting meanwhile is an error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/work.h"
#include "tensor/dtype.h"

namespace lockstep::dist {

// What a collective is, for its errors: "all_reduce (float32, 10 elements, SUM)". Formatted only when
// an error needs it (a small all-reduce costs about a microsecond; text would be most of it).
struct CollectiveInfo {
  const char* op;
  Dtype dtype = Dtype::Float32;
  int64_t numel = -1;            // -1: no tensor (barrier)
  const char* detail = nullptr;  // the reduce op's name
  int root = -1;
  std::string str() const;
};

// A buffer the queue's collectives reuse, one at a time (the one executing): grows, never shrinks.
class Scratch {
 public:
  void* get(size_t nbytes) {
    if (nbytes > bytes_) {
      buffer_.reset();
      buffer_.reset(new char[nbytes]);
      bytes_ = nbytes;
    }
    return buffer_.get();
  }

 private:
  std::unique_ptr<char[]> buffer_;
  size_t bytes_ = 0;
};

class WorkQueue {
 public:
  struct Options {
    const char* owner = "ProcessGroup";  // starts every error: "ProcessGroupGloo"
    int rank = 0;
    int size = 1;
    // Blocks SIGPIPE in the worker and around collectives run on the caller's thread, so that a write to
    // a peer that died fails with EPIPE instead of killing the process (backends that write to sockets).
    bool block_sigpipe = false;
    // Makes each collective's Work; a plain Work(op, seq) when empty.
    std::function<std::shared_ptr<Work>(const CollectiveInfo& what, uint64_t seq)> make_work;
    // Called on the worker when a blocking collective running on its caller's thread has run longer
    // than `watchdog` (MPI, which cannot interrupt it, ends the process); the worker looks every quarter
    // of `watchdog` (10 ms to 1 s) while idle. Zero: not watched.
    std::chrono::milliseconds watchdog{0};
    std::function<void(const CollectiveInfo& what, uint64_t seq)> on_stuck;
    // Called (on the executing thread) when a collective fails, before its Work finishes.
    std::function<void()> on_failure;
  };
  using Run = std::function<void(uint32_t tag)>;

  explicit WorkQueue(Options options);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Runs or queues `run` (see the contract above); returns its Work.
  std::shared_ptr<Work> submit(const CollectiveInfo& what, Run run, bool async_op);

 private:
  struct Task {
    std::shared_ptr<Work> work;
    CollectiveInfo what{nullptr};
    Run run;
    uint32_t tag = 0;
  };
  void worker_loop();
  // Runs the task on the calling thread; returns its error, for the Work (finished by the caller).
  std::exception_ptr execute(Task& task);

  const Options options_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;       // guarded by mu_
  bool stop_ = false;            // guarded by mu_
  uint64_t seq_ = 0;             // guarded by mu_
  bool worker_running_ = false;  // guarded by mu_: the worker is executing a task
  bool inline_running_ = false;  // guarded by mu_: a blocking caller is executing one
  std::chrono::steady_clock::time_point inline_started_;  // guarded by mu_: since when
  const Task* inline_task_ = nullptr;                     // guarded by mu_: which one

  // Used only by the thread executing a collective: one at a time.
  std::string failure_;  // the first collective error; non-empty fails every later collective

  std::thread worker_;  // last: started once everything above exists
};

}  // namespace lockstep::dist
