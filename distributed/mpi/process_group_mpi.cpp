// ProcessGroupMPI: MPI's initialization, and the collectives as MPI calls on the tensors' memory, run through
// the CPU groups' work queue (work_queue.h).
#include "distributed/mpi/process_group_mpi.h"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/check.h"
#include "common/deadline.h"
#include "distributed/launch_env.h"
#include "distributed/reduce_kernels.h"
#include "tensor/parallel.h"

namespace lockstep::dist {

namespace detail {
struct MpiComm {
  MPI_Comm comm = MPI_COMM_NULL;
};
}  // namespace detail

namespace {

using lockstep::detail::str_cat;

// An MPI call's failure, with MPI's own text.
void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  fail(call, " failed: ", len > 0 ? std::string(text, static_cast<size_t>(len)) : "(no error string)", " (MPI error ",
       rc, ")");
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

std::atomic<int> g_live_groups{0};  // ProcessGroupMPI instances not yet destroyed
std::atomic<bool> g_failed{false};  // a collective returned an MPI error

// MPI_Finalize waits for every rank (Open MPI fences in it). A rank leaving with a group still alive
// (an error path that skipped destroy_process_group, a collective stuck after a timed-out wait) or
// after an MPI error would wait there for ranks that are themselves waiting in a collective for it:
// the job would hang instead of ending. MPI_Abort ends it, and mpirun says which rank did.
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  const int live = g_live_groups.load();
  if (live > 0 || g_failed.load()) {
    std::fprintf(stderr, "lockstep: ProcessGroupMPI: exiting %s; MPI_Abort ends the job (MPI_Finalize would wait for "
                 "the other ranks, which may be waiting for this one)\n",
                 live > 0 ? "with the mpi process group still alive (no destroy_process_group: an error path?)"
                          : "after an MPI error");
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

std::mutex g_init_mu;

// Open MPI's waits spin on a core. That costs nothing while each rank's threads have cores of their own.
// When they do not (this rank's intra-op threads plus the mpi worker need more cores than it has, or, not
// bound to cores, the ranks on this host together do), a spinning wait on the worker takes the core the
// caller computes on: DDP's all-reduces run during backward, and a 2-rank DDP MLP step on 2 cores took
// 30 ms with spinning waits against 2.4-4.4 ms yielding (ddp_bench; gloo: 4.5-5.8 ms). Open MPI is then
// asked to yield while it waits, unless the user chose (OMPI_MCA_mpi_yield_when_idle). Yielding costs a
// small collective a few microseconds when other threads are runnable.
void yield_when_oversubscribed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const long online = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  const long mine = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(1, CPU_COUNT(&set)) : online;
  const long local_ranks = std::max(1, mpi_local_size());  // launch_env.h
  const long demand = get_num_threads() + 1;  // the caller's intra-op threads and the worker
  const bool oversubscribed = mine < online ? demand > mine : demand * local_ranks > mine;
  if (oversubscribed) ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
}

// MPI_Init_thread once per process (MPI cannot be initialized twice, nor again after MPI_Finalize), and
// MPI_Finalize at exit when lockstep was the one to initialize it.
void ensure_mpi_initialized() {
  std::lock_guard lock(g_init_mu);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  LOCKSTEP_CHECK(!finalized, "ProcessGroupMPI: MPI has already been finalized in this process and cannot be "
                 "initialized again (lockstep finalizes it at exit, never earlier; did the program call "
                 "MPI_Finalize?)");
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
    LOCKSTEP_CHECK(provided >= MPI_THREAD_SERIALIZED, "ProcessGroupMPI: the program initialized MPI with ",
                   thread_level_name(provided), ", but the mpi backend's worker thread calls MPI: initialize it with "
                   "MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...) or let lockstep do it");
    return;
  }
  yield_when_oversubscribed();
  mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "ProcessGroupMPI: MPI_Init_thread");
  std::atexit(finalize_at_exit);
  LOCKSTEP_CHECK(provided >= MPI_THREAD_SERIALIZED, "ProcessGroupMPI: MPI_Init_thread asked for MPI_THREAD_SERIALIZED "
                 "and the MPI library provides only ", thread_level_name(provided),
                 ": the mpi backend's worker thread needs it (an MPI built without thread support?)");
}

// The MPI type of a tensor's elements. bfloat16 and float16, which MPI has no type for, travel as 16-bit
// words and reduce through lockstep's own MPI ops (half_op).
MPI_Datatype mpi_type(Dtype d, const char* op) {
  switch (d) {
    case Dtype::Float32: return MPI_FLOAT;
    case Dtype::Float64: return MPI_DOUBLE;
    case Dtype::Int64: return MPI_INT64_T;
    case Dtype::UInt8: return MPI_UINT8_T;
    case Dtype::Int8: return MPI_INT8_T;
    case Dtype::Int16: return MPI_INT16_T;
    case Dtype::Int32: return MPI_INT32_T;
    case Dtype::Bool: return MPI_C_BOOL;
    case Dtype::BFloat16:
    case Dtype::Float16: return MPI_UINT16_T;
  }
  fail(op, ": the mpi backend has no MPI type for ", dtype_name(d));
}

// inout = in op inout for 16-bit floats (MPI_User_function): reduce_kernels.h's float32 sum, product,
// min or max, rounded once per call, as the gloo backend's.
template <typename T, ReduceOp kOp>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::reduce_fn<T>(kOp)(inout, in, inout, static_cast<size_t>(*len));
}

// The MPI ops for bfloat16 (table 0) and float16 (table 1), indexed by ReduceOp (never AVG: ProcessGroup
// sends SUM and divides), created on first use: on the worker thread, the only one that calls MPI (MPI_THREAD_SERIALIZED).
MPI_Op half_op(ReduceOp op, Dtype d) {
  static MPI_Op ops[2][5];
  static std::once_flag created;
  std::call_once(created, [] {
    auto make = [](MPI_User_function* fn) {
      MPI_Op o;
      mpi_check(MPI_Op_create(fn, /*commute=*/1, &o), "MPI_Op_create");
      return o;
    };
    auto table = [&](auto tag, MPI_Op* row) {
      using T = typename decltype(tag)::type;
      row[int(ReduceOp::SUM)] = make(&half_reduce<T, ReduceOp::SUM>);
      row[int(ReduceOp::PRODUCT)] = make(&half_reduce<T, ReduceOp::PRODUCT>);
      row[int(ReduceOp::MIN)] = make(&half_reduce<T, ReduceOp::MIN>);
      row[int(ReduceOp::MAX)] = make(&half_reduce<T, ReduceOp::MAX>);
    };
    table(type_tag<BFloat16>{}, ops[0]);
    table(type_tag<Float16>{}, ops[1]);
  });
  return ops[d == Dtype::Float16 ? 1 : 0][int(op)];
}

// MPI defines only the logical ops on C_BOOL: a bool all-reduce gives what the gloo backend's does.
MPI_Op mpi_op(ReduceOp op, Dtype d) {
  if (d == Dtype::Bool) return op == ReduceOp::MIN || op == ReduceOp::PRODUCT ? MPI_LAND : MPI_LOR;
  if (is_reduced_floating_point(d)) return half_op(op, d);
  switch (op) {
    case ReduceOp::SUM: return MPI_SUM;
    case ReduceOp::AVG: break;  // ProcessGroup sends SUM and divides (reduces_avg)
    case ReduceOp::MIN: return MPI_MIN;
    case ReduceOp::MAX: return MPI_MAX;
    case ReduceOp::PRODUCT: return MPI_PROD;
  }
  fail("ProcessGroupMPI: unknown reduce op ", int(op));
}

int mpi_count(int64_t numel, const char* op) {
  LOCKSTEP_CHECK(numel <= INT_MAX, op, ": the mpi backend moves at most ", INT_MAX, " elements per collective "
                 "(MPI's counts are int), got ", numel, "; split the tensor");
  return static_cast<int>(numel);
}

void check_contiguous(const Tensor& t, const char* op, const char* what) {
  LOCKSTEP_CHECK(t.is_contiguous(), op, ": the mpi backend needs contiguous tensors (MPI reads and writes the "
                 "memory as one run); ", what, " of shape ", t.shape(), " is not (use .contiguous())");
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto *x = static_cast<const char*>(a), *y = static_cast<const char*>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

std::string timeout_message(const CollectiveInfo& what, uint64_t seq, std::chrono::milliseconds limit, int rank,
                            int size) {
  return str_cat("ProcessGroupMPI: ", what.str(), " (collective #", seq, ") did not complete within ",
                 format_seconds(limit), " on rank ", rank, " of ", size, ". MPI has no timeout of its own: the "
                 "collective is still running inside MPI and cannot be cancelled, and later collectives queue behind "
                 "it; another rank may be hung, dead, or not calling it.");
}

// Work::wait under the group's timeout, which MPI itself does not have (see the header).
class MpiWork : public Work {
 public:
  MpiWork(const CollectiveInfo& what, uint64_t seq, int rank, int size, std::chrono::milliseconds timeout)
      : Work(what.op, seq), what_(what), rank_(rank), size_(size), timeout_(timeout) {}
  const CollectiveInfo& what() const { return what_; }

  void wait(std::chrono::milliseconds timeout) override {
    const std::chrono::milliseconds limit = timeout > kNoTimeout ? timeout : timeout_;
    try {
      Work::wait(limit);
    } catch (const TimeoutError&) {
      throw TimeoutError(str_cat(timeout_message(what_, seq_, limit, rank_, size_),
                                 " End the job: leave the process without destroying the group (lockstep's exit "
                                 "handler then calls MPI_Abort, and mpirun stops every rank)."));
    }
  }

 private:
  const CollectiveInfo what_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

std::pair<int, int> ProcessGroupMPI::world_rank_and_size() {
  ensure_mpi_initialized();
  int rank = 0, size = 0;
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "ProcessGroupMPI: MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size), "ProcessGroupMPI: MPI_Comm_size");
  return {rank, size};
}

ProcessGroupMPI::ProcessGroupMPI(Options options) : ProcessGroupMPI(world_rank_and_size(), options) {}

ProcessGroupMPI::ProcessGroupMPI(std::pair<int, int> rank_and_size, Options options)
    : ProcessGroup(rank_and_size.first, rank_and_size.second), options_(options) {
  LOCKSTEP_CHECK(options_.timeout.count() > 0, "ProcessGroupMPI: the timeout must be positive, got ",
                 options_.timeout.count(), " ms");
  comm_ = std::make_unique<detail::MpiComm>();
  // A communicator of its own: its messages never match the program's own on MPI_COMM_WORLD, and its
  // errors come back as codes instead of ending the process (MPI_ERRORS_ARE_FATAL, the default).
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_->comm), "ProcessGroupMPI: MPI_Comm_dup(MPI_COMM_WORLD)");
  mpi_check(MPI_Comm_set_errhandler(comm_->comm, MPI_ERRORS_RETURN), "ProcessGroupMPI: MPI_Comm_set_errhandler");
  WorkQueue::Options queue;
  queue.owner = "ProcessGroupMPI";
  queue.rank = rank();
  queue.size = size();
  queue.make_work = [this](const CollectiveInfo& what, uint64_t seq) {
    return std::make_shared<MpiWork>(what, seq, rank(), size(), options_.timeout);
  };
  // A blocking call runs inside MPI on its caller's thread, which nothing can interrupt: past the timeout
  // the worker prints the error and ends the process (status 1; mpirun then ends the job).
  queue.watchdog = options_.timeout;
  queue.on_stuck = [this](const CollectiveInfo& what, uint64_t seq) {
    std::fprintf(stderr, "%s It is a blocking call, run on the calling thread, which MPI cannot interrupt: "
                 "ending the process (status 1) so that mpirun ends the job.\n",
                 timeout_message(what, seq, options_.timeout, rank(), size()).c_str());
    std::fflush(stderr);
    std::_Exit(1);
  };
  queue.on_failure = [] { g_failed = true; };
  queue_ = std::make_unique<WorkQueue>(std::move(queue));
  ++g_live_groups;
}

ProcessGroupMPI::~ProcessGroupMPI() {
  queue_.reset();  // runs what is queued, then stops the worker
  int finalized = 0;
  MPI_Finalized(&finalized);  // at exit, the atexit MPI_Finalize may have run before a static group's end
  if (!finalized && comm_->comm != MPI_COMM_NULL) MPI_Comm_free(&comm_->comm);
  --g_live_groups;
}

void ProcessGroupMPI::check_tensor(const Tensor& t, const char* op) const {
  LOCKSTEP_CHECK(t.device().is_cpu(), op, ": the mpi backend takes CPU tensors, got one on ", t.device(),
                 " (use the nccl backend for CUDA tensors, or move the tensor with .to(Device::cpu()))");
  check_contiguous(t, op, "the tensor");
}

std::shared_ptr<Work> ProcessGroupMPI::enqueue(const CollectiveInfo& what, WorkQueue::Run run, bool async_op) {
  return queue_->submit(what, std::move(run), async_op);
}

std::shared_ptr<Work> ProcessGroupMPI::do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) {
  const MPI_Datatype type = mpi_type(tensor.dtype(), "all_reduce");
  const int count = mpi_count(tensor.numel(), "all_reduce");
  return enqueue({"all_reduce", tensor.dtype(), tensor.numel(), reduce_op_name(op)}, [this, tensor, op, type, count](uint32_t) {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), count, type, mpi_op(op, tensor.dtype()), comm_->comm),
              "MPI_Allreduce");
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupMPI::do_broadcast(Tensor& tensor, int root, bool async_op) {
  const MPI_Datatype type = mpi_type(tensor.dtype(), "broadcast");
  const int count = mpi_count(tensor.numel(), "broadcast");
  return enqueue({"broadcast", tensor.dtype(), tensor.numel(), nullptr, root}, [this, tensor, root, type, count](uint32_t) {
    mpi_check(MPI_Bcast(tensor.data_ptr(), count, type, root, comm_->comm), "MPI_Bcast");
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupMPI::do_all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                                     bool async_op) {
  for (const Tensor& t : outputs) check_contiguous(t, "all_gather", "an output");
  const MPI_Datatype type = mpi_type(input.dtype(), "all_gather");
  const int count = mpi_count(input.numel(), "all_gather");
  mpi_count(input.numel() * size(), "all_gather");  // the gathered run, as MPI indexes it
  return enqueue({"all_gather", input.dtype(), input.numel()}, [this, outputs, input, type, count](uint32_t) {
    const size_t nbytes = input.nbytes(), total = nbytes * static_cast<size_t>(size());
    // Straight into the outputs when they are one run (chunks of one tensor) the input does not overlap,
    // except as this rank's own slot (MPI_IN_PLACE); else through the scratch buffer.
    char* flat = static_cast<char*>(detail::contiguous_base(outputs));
    const bool in_place = flat && input.data_ptr() == flat + nbytes * rank();
    if (flat && !in_place && overlaps(input.data_ptr(), nbytes, flat, total)) flat = nullptr;
    char* gathered = flat ? flat : static_cast<char*>(scratch(total));
    if (in_place) {
      mpi_check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gathered, count, type, comm_->comm), "MPI_Allgather");
    } else {
      mpi_check(MPI_Allgather(input.data_ptr(), count, type, gathered, count, type, comm_->comm), "MPI_Allgather");
    }
    if (!flat) {
      for (int r = 0; r < size(); ++r) std::memcpy(outputs[r].data_ptr(), gathered + nbytes * r, nbytes);
    }
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupMPI::do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                                         ReduceOp op, bool async_op) {
  for (const Tensor& t : inputs) check_contiguous(t, "reduce_scatter", "an input");
  const MPI_Datatype type = mpi_type(output.dtype(), "reduce_scatter");
  const int count = mpi_count(output.numel(), "reduce_scatter");
  mpi_count(output.numel() * size(), "reduce_scatter");
  const CollectiveInfo what{"reduce_scatter", output.dtype(), output.numel(), reduce_op_name(op)};
  return enqueue(what, [this, output, inputs, op, type, count](uint32_t) {
    const size_t nbytes = output.nbytes(), total = nbytes * static_cast<size_t>(size());
    // MPI_Reduce_scatter_block reads the inputs as one run, which the output must not overlap.
    const char* in = static_cast<const char*>(detail::contiguous_base(inputs));
    if (!in || overlaps(output.data_ptr(), nbytes, in, total)) {
      char* staged = static_cast<char*>(scratch(total));
      for (int r = 0; r < size(); ++r) std::memcpy(staged + nbytes * r, inputs[r].data_ptr(), nbytes);
      in = staged;
    }
    mpi_check(MPI_Reduce_scatter_block(in, output.data_ptr(), count, type, mpi_op(op, output.dtype()), comm_->comm),
              "MPI_Reduce_scatter_block");
  }, async_op);
}

// The flat forms: MPI_Allgather and MPI_Reduce_scatter_block on the caller's buffers, MPI_IN_PLACE where the
// input is chunk rank() of the output (all_gather) or the output chunk rank() of the input (reduce_scatter).
std::shared_ptr<Work> ProcessGroupMPI::do_all_gather_into_tensor(Tensor& output, const Tensor& input, bool async_op) {
  const MPI_Datatype type = mpi_type(input.dtype(), "all_gather_into_tensor");
  const int count = mpi_count(input.numel(), "all_gather_into_tensor");
  mpi_count(output.numel(), "all_gather_into_tensor");
  return enqueue({"all_gather_into_tensor", input.dtype(), input.numel()}, [this, output, input, type, count](uint32_t) {
    char* out = static_cast<char*>(output.data_ptr());
    if (input.data_ptr() == out + input.nbytes() * rank()) {
      mpi_check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, count, type, comm_->comm), "MPI_Allgather");
    } else {
      mpi_check(MPI_Allgather(input.data_ptr(), count, type, out, count, type, comm_->comm), "MPI_Allgather");
    }
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupMPI::do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                                bool async_op) {
  const MPI_Datatype type = mpi_type(output.dtype(), "reduce_scatter_tensor");
  const int count = mpi_count(output.numel(), "reduce_scatter_tensor");
  mpi_count(input.numel(), "reduce_scatter_tensor");
  const char* in = static_cast<const char*>(input.data_ptr());
  const bool in_place = output.data_ptr() == in + output.nbytes() * rank();
  LOCKSTEP_CHECK(in_place || !overlaps(output.data_ptr(), output.nbytes(), in, input.nbytes()),
                 "reduce_scatter_tensor: the output overlaps the input other than as its chunk ", rank(),
                 " (MPI's buffers must not alias)");
  const CollectiveInfo what{"reduce_scatter_tensor", output.dtype(), output.numel(), reduce_op_name(op)};
  return enqueue(what, [this, output, in, in_place, op, type, count, keep = input](uint32_t) {
    const MPI_Op mop = mpi_op(op, output.dtype());
    if (in_place) {
      // In place: MPI's own in-place form would overwrite chunk 0 of the input, so the one chunk goes
      // through the scratch buffer instead (MPI's buffers must not alias).
      void* staged = scratch(output.nbytes());
      mpi_check(MPI_Reduce_scatter_block(in, staged, count, type, mop, comm_->comm), "MPI_Reduce_scatter_block");
      std::memcpy(output.data_ptr(), staged, output.nbytes());
    } else {
      mpi_check(MPI_Reduce_scatter_block(in, output.data_ptr(), count, type, mop, comm_->comm),
                "MPI_Reduce_scatter_block");
    }
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupMPI::do_barrier(bool async_op) {
  return enqueue({"barrier"}, [this](uint32_t) { mpi_check(MPI_Barrier(comm_->comm), "MPI_Barrier"); }, async_op);
}

}  // namespace lockstep::dist
