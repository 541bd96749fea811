// The CPU backend: lockstep's kernels on host memory, one file per kernel family (tensor/backend.h's
// sections): memory, copies, elementwise, GEMM, reductions and scans in cpu_backend.cpp; index and
// sort kernels in cpu/index.cpp; the fused kernels (softmax, LayerNorm, GroupNorm, max pooling, NLL,
// optimizer steps, uniform, the LSTM and GRU cells, attention) in cpu/fused.cpp. The vectorized loops
// themselves live in per-ISA files (cpu/isa.h): cpu/elementwise.cpp, cpu/reduce.cpp, cpu/scan.cpp,
// cpu/rows.cpp, cpu/group_norm.cpp, cpu/rnn_cells.cpp, cpu/attention.cpp, the GEMMs.
#pragma once

#include <cstdint>

#include "tensor/backend.h"
#include "tensor/cpu/block_cache.h"

namespace lockstep::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend();

  // --- core (cpu_backend.cpp) ---
  void* allocate(size_t nbytes, Device) override;
  void deallocate(void* p, size_t nbytes, Device) override;
  void synchronize(Device) override {}
  void empty_cache(Device) override;
  bool supports(Capability c, Dtype dtype) const override;
  BackendLimits limits() const override;
  void copy(Tensor& dst, const Tensor& src) override;
  void fill(const StridedPlan& p, Tensor& out, double v) override;
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

  // --- index and sort (cpu/index.cpp) ---
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

  // --- fused kernels (cpu/fused.cpp) ---
  void avg_pool2d(Tensor& y, const Tensor& x, const AvgPool2dArgs& a) override;  // cpu/avg_pool2d.cpp's
  void avg_pool2d_backward(Tensor& gx, const Tensor& gy, const AvgPool2dArgs& a) override;
  void resample(Tensor& y, const Tensor& x, const ResampleArgs& a) override;  // cpu/resample.cpp's
  void resample_backward(Tensor& gx, const Tensor& gy, const ResampleArgs& a) override;
  void conv2d(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
              const internal::Conv2dParams& p) override;  // oneDNN's (cpu/conv2d_onednn.cpp)
  void conv2d_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x, const Tensor& w,
                       const internal::Conv2dParams& p) override;
  void layer_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  int64_t rows, int64_t n, double eps) override;
  void layer_norm_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x, const Tensor& mean,
                           const Tensor& rstd, const Tensor& weight, int64_t rows, int64_t n) override;
  void group_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  int64_t N, int64_t C, int64_t HW, int64_t G, double eps) override;  // cpu/group_norm.cpp's
  void group_norm_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x, const Tensor& mean,
                           const Tensor& rstd, const Tensor& weight, int64_t N, int64_t C, int64_t HW,
                           int64_t G) override;
  void softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner, bool log) override;
  void softmax_backward(Tensor& gi, const Tensor& go, const Tensor& y, int64_t outer, int64_t n, int64_t inner,
                        bool log) override;
  void batch_norm_stats(Tensor& sums, const Tensor& x, int64_t N, int64_t C, int64_t inner) override;
  void batch_norm_elemt(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                        const Tensor& bias, int64_t N, int64_t C, int64_t inner) override;
  void batch_norm_backward_reduce(Tensor& sums, const Tensor& grad_y, const Tensor& x, const Tensor& mean, int64_t N,
                                  int64_t C, int64_t inner) override;
  void batch_norm_backward_elemt(Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& weight, const Tensor& sums, double count,
                                 int64_t N, int64_t C, int64_t inner) override;
  void max_pool2d(Tensor& out, Tensor& indices, const Tensor& x, const MaxPool2dArgs& a) override;
  void nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) override;
  void nll_loss_backward(Tensor& g, const Tensor& go, const Tensor& target, double scale) override;
  void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, double lr, double momentum, double dampening,
                double wd, bool nesterov, bool first) override;
  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& max_exp_avg_sq,
                 const AdamStepArgs& args) override;
  void optim_step(OptimRule rule, Tensor& param, const Tensor& grad, std::array<Tensor*, 3> states,
                  const OptimStepArgs& args) override;
  void uniform(Tensor& out, double low, double high, uint64_t seed, uint64_t counter) override;
  void normal(Tensor& out, double mean, double std, uint64_t seed, uint64_t counter) override;
  void dropout_mask(Tensor& out, double p, uint64_t seed, uint64_t counter) override;
  void bernoulli(Tensor& out, const Tensor& p, uint64_t seed, uint64_t counter) override;
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& mask, const AttentionArgs& args) override;  // cpu/attention.cpp
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

 BlockCache& cache() { return cache_; }

 private:
  BlockCache cache_;  // large freed blocks, reused (tensor/cpu/block_cache.h)
};

}  // namespace lockstep::cpu
