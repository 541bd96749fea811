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
// The collectives run through the CPU groups' WorkQueue (distributed/work_queue.h): one worker thread
// in the order they were issued; a blocking call (async_op false) issued while nothing is queued runs on
// the caller's thread, still one at a time. Errors come back from MPI (MPI_ERRORS_RETURN on the group's communicator) with
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
// world size (truncating for integers). bfloat16 and float16, which MPI has no type for, move as
// MPI_UINT16_T and reduce through lockstep's own MPI ops, in float32 and rounded once per fold (where
// PyTorch's ProcessGroupMPI refuses them). A collective moves at most INT_MAX elements (MPI's int counts).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "distributed/process_group.h"
#include "distributed/work_queue.h"

namespace lockstep::dist {

namespace detail {
struct MpiComm;  // the communicator, kept out of this header so that it needs no mpi.h
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
  // MPI_Allgather / MPI_Reduce_scatter_block straight on the flat buffers.
  std::shared_ptr<Work> do_all_gather_into_tensor(Tensor& output, const Tensor& input, bool async_op) override;
  std::shared_ptr<Work> do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                 bool async_op) override;

 private:
  ProcessGroupMPI(std::pair<int, int> rank_and_size, Options options);
  // Runs `run` through the queue (work_queue.h); `what` describes the collective in errors.
  std::shared_ptr<Work> enqueue(const CollectiveInfo& what, WorkQueue::Run run, bool async_op);
  // A buffer of at least `nbytes` for the executing collective, reused across collectives.
  void* scratch(size_t nbytes) { return scratch_.get(nbytes); }

  Options options_;
  std::unique_ptr<detail::MpiComm> comm_;
  Scratch scratch_;  // used only by the thread executing a collective: one at a time

  std::unique_ptr<WorkQueue> queue_;  // last: its worker runs collectives on everything above
};

}  // namespace lockstep::dist
