// CudaBackend: tensor/backend.h's kernel list on CUDA devices. One method per kernel, defined in the
// file of its concept; each makes the tensors' device current (OnDevice, context.h) and queues its work
// on that device's stream without waiting, except copies to the host and synchronize().
//
//   allocate, deallocate          cuda_backend.cpp (through allocator.h)
//   copy, synchronize             cuda_backend.cpp
//   fill, cast, unary, binary,    elementwise.cu
//   binary_scalar, sgd_step
//   gemm                          gemm.cpp (cuBLAS)
//   transpose2d, index_select,    indexing.cu
//   index_add
//   reduce                        reduce.cu
//   log_softmax(+backward),       softmax_loss.cu
//   nll_loss(+backward)
#pragma once

#include "tensor/backend.h"

namespace lockstep::cuda::detail {

class CudaBackend final : public Backend {
 public:
  void* allocate(size_t nbytes, Device device) override;
  void deallocate(void* ptr, size_t nbytes, Device device) override;
  void copy(Tensor& dst, const Tensor& src) override;
  void synchronize(Device device) override;

  void fill(Tensor& out, double value) override;
  void cast(Tensor& out, const Tensor& a) override;
  void unary(UnaryOp op, Tensor& out, const Tensor& a) override;
  void binary(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b, const BroadcastPlan& plan) override;
  void binary_scalar(BinaryOp op, Tensor& out, const Tensor& a, double s, bool reverse) override;
  void gemm(Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, double alpha,
            double beta) override;
  void transpose2d(Tensor& out, const Tensor& a) override;
  void reduce(ReduceOp op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) override;
  void log_softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) override;
  void log_softmax_backward(Tensor& grad_in, const Tensor& grad_out, const Tensor& output, int64_t outer, int64_t n,
                            int64_t inner) override;
  void nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) override;
  void nll_loss_backward(Tensor& grad_logp, const Tensor& grad_out, const Tensor& target, double scale) override;
  void index_select(Tensor& out, const Tensor& a, const Tensor& index) override;
  void index_add(Tensor& out, const Tensor& index, const Tensor& src) override;
  void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, bool first_step) override;
};

}  // namespace lockstep::cuda::detail
