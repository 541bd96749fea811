// CudaBackend: tensor/backend.h's kernel list on CUDA devices. One method per kernel, defined in the
// file of its concept; each makes the tensors' device current (OnDevice, context.h) and queues its work
// on that device's stream without waiting, except copies to the host and synchronize(). Every kernel
// takes bfloat16 and float16 tensors as they are: it reads and writes 16 bits and computes in float32
// (compute_t; launch.cuh's dispatch_any_floating is the fused kernels' dtype table), so the ops layer
// makes no float32 copy for CUDA.
//
//   allocate, deallocate                      cuda_backend.cpp (through allocator.h)
//   copy, synchronize, supports, limits       cuda_backend.cpp
//   fill, copy_, unary, binary,               elementwise.cu (any strides, through a StridedPlan)
//   binary_scalar, where, sgd_step
//   gemm                                      gemm.cpp (cuBLAS, strided batched); small ones in
//                                             small_gemm.cu
//   reduce                                    reduce.cu
//   scan                                      scan.cu
//   softmax(+backward), nll_loss(+backward)   softmax_loss.cu
//   layer_norm(+backward)                     layer_norm.cu
//   group_norm(+backward)                     group_norm.cu
//   batch_norm_stats, _elemt, _backward_*     batch_norm.cu
//   max_pool2d                                pool.cu
//   index_select, index_add, gather,          indexing.cu
//   scatter_add, scatter
//   sort                                      sort.cu
//   adam_step, optim_step                     optim.cu
//   uniform, normal, dropout_mask, bernoulli  random.cu
//   lstm_cell, gru_cell (+backward)           rnn_cells.cu
//   attention_forward, attention_backward     attention.cu
#pragma once

#include "tensor/backend.h"

namespace lockstep::cuda::detail {

// The widest head the attention kernels take (attention.cu keeps a row in registers); limits() reports it.
inline constexpr int kAttentionMaxHead = 128;

class CudaBackend final : public Backend {
 public:
  void* allocate(size_t nbytes, Device device) override;
  void deallocate(void* ptr, size_t nbytes, Device device) override;
  void copy(Tensor& dst, const Tensor& src) override;
  void synchronize(Device device) override;
  void empty_cache(Device) override;
  bool supports(Capability c, Dtype dtype) const override;
  BackendLimits limits() const override;

  void fill(const StridedPlan& p, Tensor& out, double value) override;
  void copy_(const StridedPlan& p, Tensor& out, const Tensor& a) override;
  void unary(UnaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const OpScalars& params = {}) override;
  void binary(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const Tensor& b,
              const OpScalars& params = {}) override;
  void binary_scalar(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, double s, bool reverse,
                     const OpScalars& params = {}) override;
  void where(const StridedPlan& p, Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;

  void gemm(Tensor& out, const Tensor& a, const Tensor& b, const GemmArgs& args) override;
  void reduce(Reduction op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) override;
  void scan(Scan op, Tensor& out, Tensor& indices, const Tensor& a, int64_t outer, int64_t n, int64_t inner,
            bool reverse) override;
  void softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner, bool log) override;
  void softmax_backward(Tensor& grad_in, const Tensor& grad_out, const Tensor& output, int64_t outer, int64_t n,
                        int64_t inner, bool log) override;
  void layer_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  int64_t rows, int64_t n, double eps) override;
  void layer_norm_backward(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_y,
                           const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t rows,
                           int64_t n) override;
  void group_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  int64_t N, int64_t C, int64_t HW, int64_t G, double eps) override;
  void group_norm_backward(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_y,
                           const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t N,
                           int64_t C, int64_t HW, int64_t G) override;
  void batch_norm_stats(Tensor& sums, const Tensor& x, int64_t N, int64_t C, int64_t inner) override;
  void batch_norm_elemt(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, int64_t N, int64_t C, int64_t inner) override;
  void batch_norm_backward_reduce(Tensor& sums, const Tensor& grad_y, const Tensor& x, const Tensor& mean, int64_t N,
                                  int64_t C, int64_t inner) override;
  void batch_norm_backward_elemt(Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& sums, double count,
                                 int64_t N, int64_t C, int64_t inner) override;
  void max_pool2d(Tensor& out, Tensor& indices, const Tensor& x, const MaxPool2dArgs& args) override;
  void nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) override;
  void nll_loss_backward(Tensor& grad_logp, const Tensor& grad_out, const Tensor& target, double scale) override;
  void index_select(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n,
                    int64_t inner) override;
  void index_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                 int64_t inner) override;
  void gather(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n, int64_t inner) override;
  void scatter_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                   int64_t inner) override;
  void scatter(Scatter op, Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
               int64_t inner) override;
  void sort(Tensor& values, Tensor& indices, const Tensor& a, int64_t rows, int64_t n, bool descending) override;
  void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, bool first_step) override;
  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& max_exp_avg_sq,
                 const AdamStepArgs& args) override;
  void optim_step(OptimRule rule, Tensor& param, const Tensor& grad, std::array<Tensor*, 3> states,
                  const OptimStepArgs& args) override;
  void uniform(Tensor& out, double low, double high, uint64_t seed, uint64_t counter) override;
  void normal(Tensor& out, double mean, double std, uint64_t seed, uint64_t counter) override;
  void dropout_mask(Tensor& out, double p, uint64_t seed, uint64_t counter) override;
  void bernoulli(Tensor& out, const Tensor& p, uint64_t seed, uint64_t counter) override;
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& mask, const AttentionArgs& args) override;
  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& grad_out, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out, const Tensor& lse,
                          const AttentionArgs& args) override;
  void lstm_cell(Tensor& gates, Tensor& h, Tensor& c, const Tensor& x_gates, const Tensor& c_prev, int64_t rows,
                 int64_t n) override;
  void lstm_cell_backward(Tensor& d_gates, Tensor& d_c_prev, const Tensor& gates, const Tensor& c_prev, const Tensor& c,
                          const Tensor& d_h, const Tensor& d_c, int64_t rows, int64_t n) override;
  void gru_cell(Tensor& gates, Tensor& h, const Tensor& x_gates, const Tensor& h_gates, const Tensor& h_prev,
                int64_t rows, int64_t n) override;
  void gru_cell_backward(Tensor& d_x_gates, Tensor& d_h_gates, Tensor& d_h_prev, const Tensor& gates,
                         const Tensor& h_gates, const Tensor& h_prev, const Tensor& d_h, int64_t rows,
                         int64_t n) override;
};

// Runs a product small enough for one thread per output (the bias too) as one kernel and returns true;
// returns false, doing nothing, for the rest (cuBLAS's). small_gemm.cu.
bool small_gemm(Tensor& out, const Tensor& a, const Tensor& b, const GemmArgs& g);

}  // namespace lockstep::cuda::detail
