// ProcessGroupNCCL: every NCCL call lockstep makes, on the group's own stream, ordered after the
// compute stream by events.
#include "common/env.h"
#include "distributed/nccl/process_group_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "distributed/launch_env.h"
#include "distributed/nccl/nccl_util.h"
#include "distributed/store/prefix_store.h"
#include "common/check.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/factory.h"

namespace lockstep::dist {

namespace {

using std::chrono::milliseconds;

using cuda::detail::DeviceGuard;

using detail::nccl_dtype;
using detail::nccl_op;

// How often the watchdog polls NCCL's asynchronous error and the oldest collective's deadline.
constexpr milliseconds kWatchdogPeriod{100};

// A CUDA event on one device, recorded where a collective ends.
struct Event {
  explicit Event(int device) : device(device) {
    DeviceGuard guard(device);
    LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  ~Event() {
    if (event) cudaEventDestroy(event);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  int device;
  cudaEvent_t event = nullptr;
};

std::atomic<uint64_t> g_instances{0};

}  // namespace

namespace detail {

struct NcclComm {
  std::mutex mu;  // serializes NCCL calls on the communicator and guards the fields below
  ncclComm_t comm = nullptr;
  int device = -1;
  int rank = 0;
  milliseconds timeout{0};
  cudaStream_t stream = nullptr;  // the group's NCCL stream
  cudaEvent_t ready = nullptr;    // recorded on the compute stream before each collective
  std::string aborted;            // why the communicator was aborted; empty while usable
  bool exit_on_error = false;     // the watchdog ends the process after aborting (NCCLOptions)

  // Collectives still running on the device, with the tensors they use.
  struct InFlight {
    std::shared_ptr<Event> done;
    std::vector<Tensor> tensors;
    const char* op;
    uint64_t seq;
    Deadline deadline;  // issue time + timeout
  };
  std::deque<InFlight> in_flight;

  // The watchdog thread (started with the communicator): a peer that dies leaves NCCL's kernels
  // waiting on the device forever, so no host call returns an error by itself. Every kWatchdogPeriod
  // it drops finished collectives, and aborts the communicator when NCCL reports an asynchronous
  // error or the oldest collective is past its deadline; ncclCommAbort ends the kernels, so a host
  // blocked on the compute stream wakes, and the next collective or wait() throws the reason.
  std::thread watchdog;
  std::condition_variable watchdog_cv;
  bool stopping = false;  // guarded by mu

  void start_watchdog() {
    watchdog = std::thread([this] { watchdog_loop(); });
  }

  void stop_watchdog() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    watchdog_cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
  }

  void watchdog_loop() {
    cudaSetDevice(device);
    std::unique_lock lock(mu);
    while (!watchdog_cv.wait_for(lock, kWatchdogPeriod, [&] { return stopping; })) {
      if (!comm || !aborted.empty()) continue;
      reap_locked();
      std::string what = in_flight.empty()
                             ? std::string("a collective")
                             : lockstep::detail::str_cat(in_flight.front().op, " (collective #", in_flight.front().seq, ")");
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm, &async);
      std::string why;
      if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
        ncclResult_t bad = r != ncclSuccess ? r : async;
        why = lockstep::detail::str_cat(what, " on rank ", rank, ": NCCL error: ", ncclGetErrorString(bad), " (",
                                        ncclGetLastError(comm), ")");
      } else if (!in_flight.empty() && Clock::now() >= in_flight.front().deadline) {
        why = lockstep::detail::str_cat(what, " on rank ", rank, " did not finish within ",
                                        dist::detail::format_seconds(timeout),
                                        " (a peer may have died, or stopped calling collectives)");
      }
      if (why.empty()) continue;
      abort_locked(why);
      std::fprintf(stderr, "ProcessGroupNCCL watchdog: %s; the communicator was aborted\n", why.c_str());
      if (exit_on_error) {
        std::fprintf(stderr, "ProcessGroupNCCL watchdog: ending the process (LOCKSTEP_NCCL_ASYNC_ERROR_HANDLING=1)\n");
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }

  // Drops the collectives that have finished (in issue order, so the first unfinished one stops it).
  void reap_locked() {
    while (!in_flight.empty() && cudaEventQuery(in_flight.front().done->event) == cudaSuccess) in_flight.pop_front();
  }

  // Throws (and aborts the communicator) when NCCL has recorded an asynchronous error.
  void check_locked(const std::string& op) {
    if (!aborted.empty()) fail("ProcessGroupNCCL: ", op, ": the communicator was aborted: ", aborted);
    if (!comm) return;
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) return;
    ncclResult_t bad = r != ncclSuccess ? r : async;
    abort_locked(lockstep::detail::str_cat(op, " on rank ", rank, ": NCCL error: ", ncclGetErrorString(bad), " (",
                                           ncclGetLastError(comm), ")"));
    fail("ProcessGroupNCCL: ", aborted);
  }

  void abort_locked(const std::string& why) {
    if (!aborted.empty()) return;
    aborted = why;
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
  }

  ~NcclComm() {
    stop_watchdog();
    std::lock_guard lock(mu);
    if (comm) {
      // Let the queued collectives finish (bounded by the timeout), then free the communicator; a
      // collective that cannot finish (a peer is gone) is aborted instead of hanging here. (No
      // DeviceGuard: a destructor must not throw, and its constructor may.)
      int previous = -1;
      cudaGetDevice(&previous);
      cudaSetDevice(device);
      Deadline deadline = deadline_after(timeout);
      while (!in_flight.empty() && Clock::now() < deadline) {
        reap_locked();
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) break;
        if (!in_flight.empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (in_flight.empty()) {
        ncclCommDestroy(comm);
      } else {
        ncclCommAbort(comm);
      }
      comm = nullptr;
      if (previous >= 0) cudaSetDevice(previous);
    }
    in_flight.clear();
    if (ready) cudaEventDestroy(ready);
    if (stream) cudaStreamDestroy(stream);
  }
};

}  // namespace detail

namespace {

// A collective's handle: its end event on the NCCL stream.
class NcclWork : public Work {
 public:
  NcclWork(std::string op, uint64_t seq, std::shared_ptr<detail::NcclComm> comm, std::shared_ptr<Event> done,
           bool blocking)
      : Work(std::move(op), seq), comm_(std::move(comm)), done_(std::move(done)), blocking_(blocking) {}

  void wait(milliseconds timeout) override {
    const bool block = blocking_ || timeout > kNoTimeout;
    const milliseconds limit = timeout > kNoTimeout ? timeout : comm_->timeout;
    Deadline deadline = deadline_after(limit);
    auto pause = std::chrono::microseconds(20);
    for (;;) {
      {
        std::lock_guard lock(comm_->mu);
        comm_->check_locked(op_);
      }
      cudaError_t state = cudaEventQuery(done_->event);
      if (state == cudaSuccess) break;
      LOCKSTEP_CHECK(state == cudaErrorNotReady, "ProcessGroupNCCL: ", op_, ": ", cudaGetErrorString(state));
      if (!block) {
        // The compute stream waits for the collective; the host goes on.
        void* compute = cuda::current_stream(done_->device);
        DeviceGuard guard(done_->device);
        LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute), done_->event, 0));
        return;
      }
      if (Clock::now() >= deadline) {
        std::string why = lockstep::detail::str_cat(op_, " (collective #", seq_, ") on rank ", comm_->rank,
                                                    " did not finish within ", dist::detail::format_seconds(limit));
        {
          std::lock_guard lock(comm_->mu);
          comm_->abort_locked(why);
        }
        throw TimeoutError("ProcessGroupNCCL: " + why + "; the communicator was aborted");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    // Finished on the device: later compute needs no extra ordering.
  }

  bool is_completed() override { return cudaEventQuery(done_->event) != cudaErrorNotReady; }

  bool is_success() override {
    if (cudaEventQuery(done_->event) != cudaSuccess) return false;
    std::lock_guard lock(comm_->mu);
    return comm_->aborted.empty();
  }

  std::exception_ptr exception() override {
    try {
      std::lock_guard lock(comm_->mu);
      comm_->check_locked(op_);
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

 private:
  std::shared_ptr<detail::NcclComm> comm_;
  std::shared_ptr<Event> done_;
  bool blocking_;
};

#define LOCKSTEP_NCCL_OK(call, op) LOCKSTEP_NCCL_CALL("ProcessGroupNCCL", call, op)

}  // namespace

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Options options)
    : ProcessGroup(rank, size), options_(options), comm_(std::make_shared<detail::NcclComm>()) {
  LOCKSTEP_CHECK(store != nullptr, "ProcessGroupNCCL: the store is null");
  LOCKSTEP_CHECK(options_.timeout.count() > 0, "ProcessGroupNCCL: the timeout must be positive, got ",
                 options_.timeout.count(), " ms");
  LOCKSTEP_CHECK(cuda::device_count() > 0, "ProcessGroupNCCL: no CUDA device is visible (",
                 cuda::unavailable_reason(), "); use the gloo backend");
  options_.blocking_wait = options_.blocking_wait || env_flag("LOCKSTEP_NCCL_BLOCKING_WAIT");
  options_.exit_on_async_error = options_.exit_on_async_error || env_flag("LOCKSTEP_NCCL_ASYNC_ERROR_HANDLING");
  store_ = std::make_shared<PrefixStore>("nccl/" + std::to_string(g_instances++), std::move(store));
  comm_->rank = rank;
  comm_->timeout = options_.timeout;
  comm_->exit_on_error = options_.exit_on_async_error;
  enable_debug_checks(store_, options_.timeout);
  if (options_.device >= 0) ensure_comm(options_.device, "ProcessGroupNCCL");
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  barrier_buffer_ = Tensor();
  comm_.reset();  // the last Work holding it frees the communicator
}

int ProcessGroupNCCL::device() const {
  std::lock_guard lock(comm_->mu);
  return comm_->comm ? comm_->device : -1;
}

void ProcessGroupNCCL::check_tensor(const Tensor& t, const char* op) const {
  LOCKSTEP_CHECK(t.device().is_cuda(), op, ": the nccl backend takes CUDA tensors, got one on ", t.device(),
                 " (use the gloo backend for CPU tensors)");
}

void ProcessGroupNCCL::ensure_comm(int device, const char* op) {
  std::lock_guard lock(comm_->mu);
  LOCKSTEP_CHECK(comm_->aborted.empty(), "ProcessGroupNCCL: ", op, ": the communicator was aborted: ", comm_->aborted);
  if (comm_->comm) {
    LOCKSTEP_CHECK(device == comm_->device, op, ": tensor on cuda:", device, " but this rank's communicator is on cuda:",
                   comm_->device, " (one device per process and group)");
    return;
  }
  LOCKSTEP_CHECK(device >= 0 && device < cuda::device_count(), "ProcessGroupNCCL: ", op, ": device cuda:", device,
                 " does not exist (", cuda::device_count(), " visible)");
  DeviceGuard guard(device);
  ncclUniqueId id;
  if (rank() == 0) {
    LOCKSTEP_NCCL_OK(ncclGetUniqueId(&id), op);
    auto* p = reinterpret_cast<const uint8_t*>(&id);
    store_->set("unique_id", std::vector<uint8_t>(p, p + sizeof(id)));
  } else {
    std::vector<uint8_t> bytes;
    try {
      bytes = store_->get("unique_id");
    } catch (const Error& e) {
      fail("ProcessGroupNCCL: ", op, ": rank ", rank(), " did not get the NCCL id from rank 0: ", e.what());
    }
    LOCKSTEP_CHECK(bytes.size() == sizeof(id), "ProcessGroupNCCL: ", op, ": the NCCL id in the store has ",
                   bytes.size(), " bytes, expected ", sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclComm_t comm = nullptr;
  LOCKSTEP_NCCL_OK(ncclCommInitRank(&comm, size(), id, rank()), op);
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_->stream, cudaStreamNonBlocking, greatest));
  LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&comm_->ready, cudaEventDisableTiming));
  comm_->comm = comm;
  comm_->device = device;
  comm_->start_watchdog();
}

template <typename Launch>
std::shared_ptr<Work> ProcessGroupNCCL::collective(const char* op, int device, std::vector<Tensor> keep, bool blocking,
                                                   Launch&& launch) {
  const Deadline deadline = deadline_after(options_.timeout);
  ensure_comm(device, op);
  std::lock_guard lock(comm_->mu);
  comm_->check_locked(op);
  DeviceGuard guard(device);
  auto compute = static_cast<cudaStream_t>(cuda::current_stream(device));
  LOCKSTEP_CUDA_CHECK(cudaEventRecord(comm_->ready, compute));
  LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(comm_->stream, comm_->ready, 0));
  launch(comm_->comm, comm_->stream);
  auto done = std::make_shared<Event>(device);
  LOCKSTEP_CUDA_CHECK(cudaEventRecord(done->event, comm_->stream));
  comm_->reap_locked();
  const uint64_t seq = ++seq_;
  comm_->in_flight.push_back({done, std::move(keep), op, seq, deadline});
  return std::make_shared<NcclWork>(op, seq, comm_, std::move(done), blocking || options_.blocking_wait);
}

std::shared_ptr<Work> ProcessGroupNCCL::do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) {
  return collective("all_reduce", tensor.device().index, {tensor}, false, [&](ncclComm_t comm, cudaStream_t stream) {
    LOCKSTEP_NCCL_OK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_dtype(tensor.dtype()),
                                   nccl_op(op), comm, stream),
                     "all_reduce");
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::do_broadcast(Tensor& tensor, int root, bool async_op) {
  return collective("broadcast", tensor.device().index, {tensor}, false, [&](ncclComm_t comm, cudaStream_t stream) {
    LOCKSTEP_NCCL_OK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_dtype(tensor.dtype()),
                                   root, comm, stream),
                     "broadcast");
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::do_all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                                      bool async_op) {
  std::vector<Tensor> keep(outputs);
  keep.push_back(input);
  return collective("all_gather", input.device().index, std::move(keep), false,
                    [&](ncclComm_t comm, cudaStream_t stream) {
    const auto dtype = nccl_dtype(input.dtype());
    const size_t n = static_cast<size_t>(input.numel());
    if (void* flat = detail::contiguous_base(outputs)) {
      LOCKSTEP_NCCL_OK(ncclAllGather(input.data_ptr(), flat, n, dtype, comm, stream), "all_gather");
      return;
    }
    // Separate outputs: one broadcast per rank, fused by NCCL into a single launch.
    LOCKSTEP_NCCL_OK(ncclGroupStart(), "all_gather");
    for (int r = 0; r < size(); ++r) {
      const void* send = r == rank() ? input.data_ptr() : outputs[r].data_ptr();
      LOCKSTEP_NCCL_OK(ncclBroadcast(send, outputs[r].data_ptr(), n, dtype, r, comm, stream), "all_gather");
    }
    LOCKSTEP_NCCL_OK(ncclGroupEnd(), "all_gather");
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                                          ReduceOp op, bool async_op) {
  std::vector<Tensor> keep(inputs);
  keep.push_back(output);
  return collective("reduce_scatter", output.device().index, std::move(keep), false,
                    [&](ncclComm_t comm, cudaStream_t stream) {
    const auto dtype = nccl_dtype(output.dtype());
    const auto redop = nccl_op(op);
    const size_t n = static_cast<size_t>(output.numel());
    if (void* flat = detail::contiguous_base(inputs)) {
      LOCKSTEP_NCCL_OK(ncclReduceScatter(flat, output.data_ptr(), n, dtype, redop, comm, stream), "reduce_scatter");
      return;
    }
    // Separate inputs: one reduce per rank (rank r receives the reduction of every inputs[r]).
    LOCKSTEP_NCCL_OK(ncclGroupStart(), "reduce_scatter");
    for (int r = 0; r < size(); ++r) {
      LOCKSTEP_NCCL_OK(ncclReduce(inputs[r].data_ptr(), output.data_ptr(), n, dtype, redop, r, comm, stream),
                       "reduce_scatter");
    }
    LOCKSTEP_NCCL_OK(ncclGroupEnd(), "reduce_scatter");
  });
}

// The flat forms: one NCCL call on the caller's buffers (in place where the input is chunk rank() of the
// output, or the output chunk rank() of the input, as NCCL defines it).
std::shared_ptr<Work> ProcessGroupNCCL::do_all_gather_into_tensor(Tensor& output, const Tensor& input,
                                                                  bool async_op) {
  return collective("all_gather_into_tensor", input.device().index, {output, input}, false,
                    [&](ncclComm_t comm, cudaStream_t stream) {
    LOCKSTEP_NCCL_OK(ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()),
                                   nccl_dtype(input.dtype()), comm, stream),
                     "all_gather_into_tensor");
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                                 bool async_op) {
  return collective("reduce_scatter_tensor", output.device().index, {output, input}, false,
                    [&](ncclComm_t comm, cudaStream_t stream) {
    LOCKSTEP_NCCL_OK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                                       nccl_dtype(output.dtype()), nccl_op(op), comm, stream),
                     "reduce_scatter_tensor");
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::do_barrier(bool async_op) {
  int device = this->device();
  if (device < 0) {
    const int local = discover_launch_env().local_rank;  // env:// (launch_env.h)
    const int guess = local >= 0 ? local : rank();
    device = guess % std::max(1, cuda::device_count());
  }
  if (!barrier_buffer_.defined()) barrier_buffer_ = zeros({1}, TensorOptions(kFloat32, Device::cuda(device)));
  Tensor& buffer = barrier_buffer_;
  return collective("barrier", device, {buffer}, /*blocking=*/true, [&](ncclComm_t comm, cudaStream_t stream) {
    LOCKSTEP_NCCL_OK(ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), 1, ncclFloat32, ncclSum, comm, stream),
                     "barrier");
  });
}

}  // namespace lockstep::dist
