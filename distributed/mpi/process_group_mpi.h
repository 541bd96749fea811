// ProcessGroupMPI: collectives on CPU tensors over MPI (c10d's ProcessGroupMPI), built where Open MPI's
// headers and library are found (third_party/mpi_configure.bzl; LOCKSTEP_WITH_MPI is then defined for
// every target that depends on it).
//
//   mpirun -np 2 bazel-bin/examples/linear_demo --backend mpi
//   dist::init_process_group({.backend = "mpi"});   // rank and world size from MPI_COMM_WORLD
//
// The group is MPI_COMM_WORLD (a duplicate of it, so that its messages never meet the program's own
// MPI calls): rank and size come from MPI, no store or init_method is needed. The first group in a
// process initializes MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED: one thread at a time calls MPI,
// which is all the worker below needs; a lower level provided by the library is an error) unless the
// program has already done so. MPI_Finalize runs at exit (std::atexit), not when the group is destroyed:
// MPI cannot be initialized again in a process, and a later group needs it. A program that initialized
// MPI itself finalizes it itself. Leaving with a group still alive (destroy_process_group skipped, as on
// an error path) or after an MPI error calls MPI_Abort at exit instead: MPI_Finalize waits for every
// rank, and the others may be waiting in a collective for this one, so the job would hang.
//
// One worker thread runs the collectives in the order they were issued, so each Work completes in
// order and the calls return at once; a blocking call (async_op false) issued while nothing is queued
// runs on the caller's thread instead (no thread hand-off: what a small all-reduce costs), still one at
// a time. Errors come back from MPI (MPI_ERRORS_RETURN on the group's communicator) with
// MPI_Error_string's text in the message; a collective that failed leaves the group unusable.
//
// Timeouts: MPI has none. A collective whose peer hangs blocks inside MPI for ever, and cannot be
// cancelled. A blocking call that runs on the caller's thread is watched by the idle worker: past the
// timeout it prints the error (op, rank) and ends the process with status 1, and mpirun ends the job.
// For a queued collective, Work::wait() gives up after the group's timeout (or its own) with a
// TimeoutError naming the collective and the rank; the collective still runs on the worker, every later
// collective queues behind it, and the job must then be ended: leave the process without destroying
// the group (destruction waits for the stuck collective), e.g. throw to main and return non-zero; the
// exit handler calls MPI_Abort and mpirun ends every rank. A rank that dies is noticed by mpirun itself, which ends
// the whole job with its own message. LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL's cross-rank checks need a
// store: MPI groups run without them.
//
// Tensors: CPU only. float32, float64, int64 and uint8 map to MPI_FLOAT, MPI_DOUBLE, MPI_INT64_T and
// MPI_UINT8_T; bool to MPI_C_BOOL, reduced as the gloo backend does (SUM, MAX and AVG are logical or,
// MIN and PRODUCT logical and: MPI defines only logical ops on C_BOOL). AVG is the sum divided by the
// world size (truncating for integers). bfloat16 moves (broadcast, all_gather) but does not reduce: MPI
// has no bfloat16 type (as PyTorch's ProcessGroupMPI). A collective moves at most INT_MAX elements
// (MPI's int counts).
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

#include "distributed/process_group.h"

namespace lockstep::dist {

namespace detail {
struct MpiComm;  // the communicator, kept out of this header so that it needs no mpi.h

// What a collective is, for its errors: "all_reduce (float32, 10 elements, SUM)".
struct CollectiveInfo {
  const char* op;
  Dtype dtype = Dtype::Float32;
  int64_t numel = -1;            // -1: no tensor (barrier)
  const char* detail = nullptr;  // the reduce op's name
  int root = -1;
  std::string str() const;
};
}  // namespace detail

struct MPIOptions {
  // gloo's default (PyTorch's for CPU backends): how long Work::wait waits, see the header comment.
  static constexpr std::chrono::milliseconds kDefaultTimeout{30 * 60 * 1000};
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

class ProcessGroupMPI : public ProcessGroup {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = MPIOptions::kDefaultTimeout;
  using Options = MPIOptions;

  // Collective over MPI_COMM_WORLD: every rank constructs its group, in the same order.
  explicit ProcessGroupMPI(Options options = {});
  ~ProcessGroupMPI() override;

  std::string backend_name() const override { return "mpi"; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // MPI_COMM_WORLD's rank and size, initializing MPI when nothing has yet (what the constructor uses).
  static std::pair<int, int> world_rank_and_size();

 protected:
  void check_tensor(const Tensor& t, const char* op) const override;
  std::shared_ptr<Work> do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) override;
  std::shared_ptr<Work> do_broadcast(Tensor& tensor, int root, bool async_op) override;
  std::shared_ptr<Work> do_all_gather(std::vector<Tensor>& outputs, const Tensor& input, bool async_op) override;
  std::shared_ptr<Work> do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                          bool async_op) override;
  std::shared_ptr<Work> do_barrier(bool async_op) override;

 private:
  struct Task {
    std::shared_ptr<Work> work;
    std::function<void()> run;
  };
  ProcessGroupMPI(std::pair<int, int> rank_and_size, Options options);
  // Queues `run` for the worker, or runs it on this thread when `async_op` is false and the group is
  // idle; returns its Work. `what` describes the collective in errors (formatted only then: a small
  // all-reduce costs about a microsecond more than MPI_Allreduce, and text would be most of it).
  std::shared_ptr<Work> enqueue(const detail::CollectiveInfo& what, std::function<void()> run, bool async_op);
  void worker_loop();
  // Runs the task on the calling thread; returns its error, for the Work (finished by the caller).
  std::exception_ptr execute(Task& task);
  // A buffer of at least `nbytes` for the executing collective, reused across collectives.
  void* scratch(size_t nbytes);

  Options options_;
  std::unique_ptr<detail::MpiComm> comm_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;         // guarded by mu_
  bool stop_ = false;              // guarded by mu_
  uint64_t seq_ = 0;               // guarded by mu_
  bool worker_running_ = false;    // guarded by mu_: the worker is executing a task
  bool inline_running_ = false;    // guarded by mu_: a blocking caller is executing one
  std::chrono::steady_clock::time_point inline_started_;  // guarded by mu_: since when
  const Work* inline_task_ = nullptr;                      // guarded by mu_: which one

  // Used only by the thread executing a collective: one at a time.
  std::string failure_;  // the first collective error; non-empty makes the group unusable
  std::unique_ptr<char[]> scratch_;
  size_t scratch_bytes_ = 0;

  std::thread worker_;  // last: started once everything above exists
};

}  // namespace lockstep::dist
