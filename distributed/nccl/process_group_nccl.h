// ProcessGroupNCCL: collectives on CUDA tensors with NCCL (c10d's ProcessGroupNCCL). Built only where
// NCCL is found and CUDA is on (LOCKSTEP_WITH_NCCL is then defined for every target that depends on it).
//
// Streams: each group owns one NCCL stream. A collective first makes that stream wait for everything
// already queued on lockstep's compute stream (tensor/cuda/cuda.h current_stream) through an event, so
// it sees the tensors as the ops before it left them; Work::wait() then makes the compute stream wait
// for the collective's own event, without blocking the host. The tensors stay referenced until the
// collective has finished on the device, whatever the caller does with its handles.
//
// Errors: NCCL reports failures asynchronously (a peer died, a network error). wait() checks
// ncclCommGetAsyncError; in blocking mode (Options::blocking_wait, LOCKSTEP_NCCL_BLOCKING_WAIT=1, or a
// timeout passed to wait()) it blocks the host until the collective has finished, polling for errors,
// and aborts the communicator (ncclCommAbort) when the timeout passes. A watchdog thread does the same
// in the background for every collective (a dead peer leaves NCCL's kernels waiting forever, and a
// non-blocking wait() has returned long before): it aborts the communicator on an asynchronous error
// or once the oldest collective is past the timeout, prints why, and, with exit_on_async_error, ends
// the process. An aborted group refuses every later collective with the reason. barrier() always
// blocks the host. NCCL_* environment variables reach NCCL untouched.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/store/store.h"

namespace lockstep::dist {

namespace detail {
struct NcclComm;  // the communicator, its stream and events (process_group_nccl.cpp)
}

struct NCCLOptions {
  // PyTorch's default collective timeout for NCCL.
  static constexpr std::chrono::milliseconds kDefaultTimeout{10 * 60 * 1000};

  std::chrono::milliseconds timeout = kDefaultTimeout;
  // The CUDA device of this rank's communicator. With a device the communicator is created in the
  // constructor (collective: every rank must construct the group); with -1 it is created by the
  // first collective, on its tensors' device (barrier before any other collective uses LOCAL_RANK,
  // else the rank, modulo the device count). Every collective's tensors must be on that device.
  int device = -1;
  // wait() blocks the host until the collective finishes (see the header comment). Also set by
  // LOCKSTEP_NCCL_BLOCKING_WAIT=1.
  bool blocking_wait = false;
  // When the watchdog aborts the communicator, it also ends the process (status 1) instead of leaving
  // the error to the next collective (PyTorch's TORCH_NCCL_ASYNC_ERROR_HANDLING). Also set by
  // LOCKSTEP_NCCL_ASYNC_ERROR_HANDLING=1.
  bool exit_on_async_error = false;
};

class ProcessGroupNCCL : public ProcessGroup {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = NCCLOptions::kDefaultTimeout;
  using Options = NCCLOptions;

  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Options options = {});
  ~ProcessGroupNCCL() override;

  std::string backend_name() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // The communicator's device; -1 until it exists.
  int device() const;

 protected:
  void check_tensor(const Tensor& t, const char* op) const override;
  bool reduces_avg() const override { return true; }  // ncclAvg
  std::shared_ptr<Work> do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) override;
  std::shared_ptr<Work> do_broadcast(Tensor& tensor, int root, bool async_op) override;
  std::shared_ptr<Work> do_all_gather(std::vector<Tensor>& outputs, const Tensor& input, bool async_op) override;
  std::shared_ptr<Work> do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                          bool async_op) override;
  std::shared_ptr<Work> do_barrier(bool async_op) override;
  // ncclAllGather / ncclReduceScatter on the flat buffers.
  std::shared_ptr<Work> do_all_gather_into_tensor(Tensor& output, const Tensor& input, bool async_op) override;
  std::shared_ptr<Work> do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                 bool async_op) override;

 private:
  // Creates the communicator on `device` (rank 0 publishes the ncclUniqueId in the store), or checks
  // that it already lives there. `op` names the caller in errors.
  void ensure_comm(int device, const char* op);
  // Queues launch(comm, stream) on the NCCL stream after the compute stream's pending work; `keep`
  // stays referenced until the collective has finished on the device.
  template <typename Launch>
  std::shared_ptr<Work> collective(const char* op, int device, std::vector<Tensor> keep, bool blocking,
                                   Launch&& launch);

  Options options_;
  std::shared_ptr<Store> store_;  // this group's prefix of the store
  std::shared_ptr<detail::NcclComm> comm_;
  Tensor barrier_buffer_;  // one float on the communicator's device
  uint64_t seq_ = 0;
};

}  // namespace lockstep::dist
