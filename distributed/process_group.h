// ProcessGroup: the collectives every backend provides (c10d's ProcessGroup). A group is `size()`
// processes, each knowing its `rank()`; every rank must issue the same collectives, with tensors of
// the same shape and dtype, in the same order. Each call checks its arguments here, on the calling
// rank, and then hands them to the backend (ProcessGroupGloo for CPU tensors, ProcessGroupNCCL for
// CUDA tensors), which queues the operation and returns a Work at once (work.h).
//
// Tensors are handles (tensor/tensor.h): the collectives write into the caller's tensors in place,
// and the Work keeps them alive until it has finished. Every dtype moves; bfloat16 and float16 reduce in
// float32 inside the reduction and are rounded once per fold (every operand at once where a backend has
// them together: shared memory, the CUDA emulator's NCCL; per hop around a ring, as NCCL and gloo).
// The gloo and mpi backends reduce every dtype, NCCL float32, float64, int64, bfloat16 and float16.
//
// `async_op` is torch.distributed's flag: true (the default here, as for c10d's ProcessGroup methods)
// returns a Work at once; false returns once the collective has finished, rethrowing its error, like
// `dist.all_reduce(t)`. A blocking call lets the backend skip its queue: Gloo then runs the collective
// on the calling thread when nothing else is queued (two thread hand-offs fewer, which is most of a
// small all-reduce's cost on a busy machine).
//
// With LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL, backends built on a store compare every collective's
// fingerprint across the ranks before running it (distributed/debug.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/work.h"
#include "tensor/tensor.h"

namespace lockstep::dist {

class Store;
namespace detail {
class CollectiveChecker;
}

class ProcessGroup {
 public:
  // Throws unless size >= 1 and 0 <= rank < size.
  ProcessGroup(int rank, int size);
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;
  // How the collectives move data: "nccl"; for gloo "tcp", "shm" (every rank on one host) or "shm+tcp"
  // (shared memory within each host, TCP between hosts). See ProcessGroupGloo.
  virtual std::string transport() const { return backend_name(); }

  // tensor = op(tensor of every rank), in place on every rank.
  std::shared_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::SUM, bool async_op = true);
  // tensor = root's tensor, on every rank.
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0, bool async_op = true);
  // outputs[r] = input of rank r. `outputs` holds size() tensors shaped like `input`. Outputs that are
  // consecutive slices of one allocation (chunks of one tensor) are gathered into directly.
  std::shared_ptr<Work> all_gather(std::vector<Tensor>& outputs, const Tensor& input, bool async_op = true);
  // output = op over ranks of inputs[rank()]: `inputs` holds size() tensors shaped like `output`.
  std::shared_ptr<Work> reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op = ReduceOp::SUM, bool async_op = true);
  // The flat forms sharding is built on (torch.distributed's names): `output` (size() * n elements,
  // contiguous) = every rank's `input` (n elements) in rank order; `output` (n elements) = op over ranks
  // of chunk rank() of `input` (size() * n elements, contiguous). Any shapes with those element counts.
  // In place: the input may be chunk rank() of the output (all-gather), the output chunk rank() of the
  // input (reduce-scatter; the input's other chunks are left as they were). Each backend runs them on the
  // flat buffers with an algorithm of its own (do_all_gather_into_tensor below): shared memory reads the
  // others' inputs directly, TCP goes around the ring, MPI and NCCL call their flat collectives.
  std::shared_ptr<Work> all_gather_into_tensor(Tensor& output, const Tensor& input, bool async_op = true);
  std::shared_ptr<Work> reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::SUM,
                                              bool async_op = true);
  // Completes once every rank has entered the barrier.
  std::shared_ptr<Work> barrier(bool async_op = true);

  // True when collectives are compared across ranks before they run (LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL).
  bool checks_collectives() const { return checker_ != nullptr; }

 protected:
  // Called by a backend's constructor: when LOCKSTEP_DISTRIBUTED_DEBUG is DETAIL, compare every later
  // collective's fingerprint through `store` (the group's own prefix), waiting up to `timeout`.
  void enable_debug_checks(std::shared_ptr<Store> store, std::chrono::milliseconds timeout);

  // The backend's own tensor requirement (device); `op` names the collective in the error.
  virtual void check_tensor(const Tensor& t, const char* op) const = 0;
  // True when the backend computes AVG itself (NCCL's ncclAvg; shared memory divides inside its last
  // fold). Otherwise the do_ calls never see AVG: they get SUM, and the public call divides the result
  // by the world size once the data has moved (Work::then), the same way for every backend.
  virtual bool reduces_avg() const { return false; }
  // Called with checked arguments, never with zero elements or in a group of one, nor with AVG unless
  // reduces_avg() (the public calls finish
  // those themselves, the same way for every backend). With `async_op` false the caller waits for the
  // returned Work right away, so a backend may run the collective before returning.
  virtual std::shared_ptr<Work> do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) = 0;
  virtual std::shared_ptr<Work> do_broadcast(Tensor& tensor, int root, bool async_op) = 0;
  virtual std::shared_ptr<Work> do_all_gather(std::vector<Tensor>& outputs, const Tensor& input, bool async_op) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                                  bool async_op) = 0;
  virtual std::shared_ptr<Work> do_barrier(bool async_op) = 0;
  // The flat forms, with checked, contiguous, one-dimensional tensors: `output` of size() * input.numel()
  // elements for all_gather, `input` of size() * output.numel() for reduce_scatter. The input may be
  // chunk rank() of the output (all_gather in place), the output chunk rank() of the input. By default
  // the chunks of the flat tensor go to do_all_gather and do_reduce_scatter; a backend with a flat
  // algorithm of its own (one run of memory, no per-chunk bookkeeping) overrides these.
  virtual std::shared_ptr<Work> do_all_gather_into_tensor(Tensor& output, const Tensor& input, bool async_op);
  virtual std::shared_ptr<Work> do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                         bool async_op);

 private:
  int rank_;
  int size_;
  std::unique_ptr<detail::CollectiveChecker> checker_;  // null unless DETAIL
};

namespace detail {
// When tensors[i] starts right where tensors[i - 1] ends, for every i (consecutive slices of one
// allocation), the first one's data pointer; else null. All tensors have the same dtype and numel.
void* contiguous_base(const std::vector<Tensor>& tensors);
}  // namespace detail

}  // namespace lockstep::dist
