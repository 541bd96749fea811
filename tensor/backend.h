// Backend: the short list of kernels a device must implement, in two parts: the core kernels (class
// Backend) and the fused extensions (class FusedKernels), each grouped by family; the families with
// rules (elementwise, reductions, scans, optimizer steps) read them from one table shared by both
// devices. Everything else in lockstep (views, autograd, nn, optim) is built from these, so a new
// device is a list to fill, not a second framework.
//
// Contract for every kernel: shapes, dtypes and devices were already checked by the ops layer
// (tensor/ops*.cpp); outputs are allocated and on the backend's device. Elementwise kernels take any
// strides (a StridedPlan per call); the others take contiguous tensors unless they say otherwise.
// bfloat16 and float16 reach the elementwise kernels (computed in float32, stored at 16 bits), every
// backend's bfloat16 GEMM (and CUDA's float16 one), every CUDA kernel, and the CPU kernels whose
// comments name them; the ops layer gives the others float32 copies.
#pragma once

#include <array>

#include <cstdint>
#include <vector>

#include "tensor/attention_ops.h"
#include "tensor/conv_params.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/elementwise_ops.h"
#include "tensor/optim_step.h"
#include "tensor/reduce_ops.h"
#include "tensor/scan_ops.h"
#include "tensor/scatter_ops.h"

namespace lockstep {

class Tensor;

// An elementwise loop after shape checking: up to kMaxOperands tensors (operand 0 is the output) walked
// together over `shape`, each with its own element strides (0 where it is broadcast). Adjacent
// dimensions that every operand walks as one are merged, so a contiguous op is one flat dimension.
struct StridedPlan {
  static constexpr int kMaxDims = 10;
  static constexpr int kMaxOperands = 4;
  int nd = 0;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[kMaxOperands][kMaxDims] = {};

  // One dimension with every operand at stride 1 (or 0 for a broadcast scalar): a flat loop.
  bool flat() const {
    if (nd != 1) return false;
    for (int k = 0; k < kMaxOperands; ++k)
      if (stride[k][0] > 1) return false;
    return true;
  }
};

// C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] (+ bias on every row) for b < batch, row-major with
// leading dimensions: op(A) is [m, k], op(B) [k, n], C [m, n]; matrix b starts batch_stride_* elements
// after matrix b-1 (0: the same matrix for every b). Pointers are the tensors' data_ptr(). bias, where
// given, is a contiguous [n] of C's dtype and device: Linear's forward in one call, which a backend may
// run as one kernel (on a GPU, one launch instead of two).
struct GemmArgs {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0;
  double alpha = 1, beta = 0;
  const Tensor* bias = nullptr;
};

// The plan of an elementwise pass over every C of a GemmArgs: [batch, m, n] with C's strides for each
// operand (backend.cpp).
StridedPlan gemm_c_plan(const GemmArgs& g);

// Max pooling windows over planes [planes, H, W] (padding already applied by the caller): output
// [planes, OH, OW], window (oh, ow) covering rows oh * sh + i * dh and columns ow * sw + j * dw for
// i < kh, j < kw.
struct MaxPool2dArgs {
  int64_t planes = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
};

// Average pooling windows over contiguous planes [planes, H, W] with implicit zero padding ph, pw:
// output [planes, OH, OW], window (oh, ow) covering rows [oh * sh - ph, + kh) and columns [ow * sw - pw,
// + kw), clipped to the input; each divided by its count of input cells, or with count_include_pad by
// its cells inside the input and its padding (not beyond: ceil_mode's extra cells), as PyTorch.
struct AvgPool2dArgs {
  int64_t planes = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  bool count_include_pad = true;
};

// What a backend computes itself, asked by the ops and layers above (supports(), below) instead of
// testing the device, so that a new device answers here and nowhere else. Where the answer is no, the op
// is composed from the core kernels, runs on float32 copies, or leaves a check to the kernel.
enum class Capability : uint8_t {
  kGemm,              // gemm takes operands of this dtype (no: float32 copies, the result rounded once)
  kMixedWithFloat32,  // binary kernels read this 16-bit dtype beside float32 (no: a float32 copy first)
  kSoftmaxAnyDim,     // softmax of this dtype along any dimension (no: only along the last one; others
                      // on a float32 copy)
  kAvgPool2d,         // avg_pool2d and its backward, below (no: strided adds over a padded copy)
  kConv2d,            // conv2d and its backward, below (no: im2col and gemm, tensor/conv2d.cpp)
  kResample,          // resample and its backward, below (no: index_select, weights and a sum, as
                      // nn/upsampling.cpp composes them)
  kPhiloxRandom,      // uniform, normal, dropout_mask and bernoulli draw this dtype (no: the host
                      // generator's sequential stream, which the CPU keeps so seeds reproduce)
  kHostReadable,      // the device's values are read without a synchronization (any dtype): the ops
                      // check inputs on the host (integer divisors, class targets, probabilities);
                      // a device checks them in its kernels instead
};

// One dimension's resampling (F::interpolate's, a dimension at a time): x [outer, in, inner] ->
// y [outer, out, inner] with y[b, o, i] = sum_t weight[o * taps + t] * x[b, index[o * taps + t], i].
// index and weight are host arrays of out * taps entries, computed by the caller; weight null: every
// tap weighs 1 (nearest). The sums are in x's compute dtype (float32 for 16-bit x, as PyTorch's opmath).
struct ResampleArgs {
  int64_t outer = 0, in = 0, out = 0, inner = 0, taps = 1;
  const int64_t* index = nullptr;
  const double* weight = nullptr;
};

// A backend's sizes that the layers above plan with.
struct BackendLimits {
  int64_t attention_head_dim = 0;   // the widest head fused attention takes (0: any)
  int64_t im2col_chunk_elements = 0;  // how many column elements composed convolution builds at once
};

// Fused kernels: each could be composed from the core kernels below, but a device runs it in one pass
// for speed (softmax, LayerNorm, GroupNorm, BatchNorm, max pooling, the NLL loss, the optimizer steps,
// the LSTM and GRU cells) or to draw on the device (uniform, normal). Each family's rule is shared by
// both devices: the optimizer steps' in tensor/optim_step.h, the recurrent cells' in
// tensor/rnn_cell_ops.h, max pooling's NaN rule is argmax's (tensor/reduce_ops.h). Contiguous tensors.
class FusedKernels {
 public:
  virtual ~FusedKernels() = default;

  // Whether this backend computes `c` for `dtype` itself (Capability), and the sizes it plans with.
  virtual bool supports(Capability c, Dtype dtype) const = 0;
  virtual BackendLimits limits() const = 0;

  // --- optional kernels: called only where supports() says yes (the defaults throw) ---
  // Average pooling (AvgPool2dArgs) of x [planes, H, W] into y [planes, OH, OW]; its backward spreads
  // grad_y back into grad_x [planes, H, W]. kAvgPool2d's dtypes, computed with float32 sums.
  virtual void avg_pool2d(Tensor& y, const Tensor& x, const AvgPool2dArgs& args);
  virtual void avg_pool2d_backward(Tensor& grad_x, const Tensor& grad_y, const AvgPool2dArgs& args);
  // Resampling (ResampleArgs) of x [outer, in, inner] into y [outer, out, inner]; its backward adds each
  // grad_y value, times its weight, into the grad_x cells it read (grad_x [outer, in, inner], written
  // whole). kResample's dtypes.
  virtual void resample(Tensor& y, const Tensor& x, const ResampleArgs& args);
  virtual void resample_backward(Tensor& grad_x, const Tensor& grad_y, const ResampleArgs& args);
  // Direct 2-D convolution (tensor/conv2d.h states the shapes), kConv2d's dtypes, non-empty operands of
  // one dtype: y = conv(x, weight) + bias (bias may be undefined).
  virtual void conv2d(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const internal::Conv2dParams& p);
  // Its gradients from grad_y, each computed where defined (allocated by the caller): grad_x (needs
  // weight; x may be undefined when grad_weight is), grad_weight (needs x) and grad_bias (only beside
  // grad_weight).
  virtual void conv2d_backward(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_y,
                               const Tensor& x, const Tensor& weight, const internal::Conv2dParams& p);

  // (log_)softmax along the middle dimension of [outer, n, inner].
  virtual void softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner, bool log) = 0;
  // log: grad_in = g - exp(y) * sum(g); else grad_in = y * (g - sum(g * y)); sums along the dimension.
  virtual void softmax_backward(Tensor& grad_in, const Tensor& grad_out, const Tensor& output, int64_t outer,
                                int64_t n, int64_t inner, bool log) = 0;
  // LayerNorm over the last dimension of x [rows, n], all contiguous and of one floating dtype:
  // y = (x - mean) * rstd * weight + bias (weight and bias [n], each may be undefined), with
  // rstd = 1 / sqrt(biased variance + eps); mean and rstd [rows] are kept for the backward.
  virtual void layer_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                          const Tensor& bias, int64_t rows, int64_t n, double eps) = 0;
  // Its gradients from grad_y: grad_x [rows, n]; grad_weight and grad_bias [n] where defined (undefined:
  // not wanted). With xhat = (x - mean) * rstd and gh = grad_y * weight:
  // grad_x = rstd * (gh - mean_j(gh) - xhat * mean_j(gh * xhat)), grad_weight = sum over rows of
  // grad_y * xhat, grad_bias = sum over rows of grad_y.
  virtual void layer_norm_backward(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_y,
                                   const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                   int64_t rows, int64_t n) = 0;
  // GroupNorm over x [N, C, HW] in G groups of C / G consecutive channels, all contiguous and of one
  // floating dtype: each (n, g)'s C / G * HW values are normalized together, then scaled and shifted
  // per channel, y = (x - mean) * rstd * weight[c] + bias[c] (weight and bias [C], each may be
  // undefined), rstd = 1 / sqrt(biased variance + eps); mean and rstd [N, G] (LayerNorm's dtypes) are
  // kept for the backward. HW may be 1 (a [N, C] input), as C / G may.
  virtual void group_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                          const Tensor& bias, int64_t N, int64_t C, int64_t HW, int64_t G, double eps) = 0;
  // Its gradients from grad_y, each where defined: grad_x [N, C, HW], grad_weight and grad_bias [C].
  // With per-(n, c) sums over HW db = sum grad_y, ds = sum grad_y * (x - mean), and per (n, g) over
  // its channels dbg = sum weight * db, dsg = sum weight * ds (weight undefined: 1), m = C / G * HW:
  // grad_x = rstd * weight * grad_y - rstd^3 * dsg / m * (x - mean) - rstd * dbg / m,
  // grad_weight = sum over n of rstd * ds, grad_bias = sum over n of db.
  virtual void group_norm_backward(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_y,
                                   const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                   int64_t N, int64_t C, int64_t HW, int64_t G) = 0;
  // Batch norm over x [N, C, inner] (tensor/batch_norm.h states the rules), x, grad_y and the outputs of
  // x's dtype; the per-channel statistics (mean, invstd [C], sums [2, C]) float64, so that a channel's
  // millions of values add up exactly enough and SyncBatchNorm all-reduces them as they are. weight and
  // bias [C] of x's compute dtype (compute_t: float32 beside a 16-bit x), or undefined. sums = [sum x,
  // sum x^2] per channel.
  virtual void batch_norm_stats(Tensor& sums, const Tensor& x, int64_t N, int64_t C, int64_t inner) = 0;
  // y = x * a + b with a = invstd * weight, b = bias - mean * a per channel.
  virtual void batch_norm_elemt(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                const Tensor& weight, const Tensor& bias, int64_t N, int64_t C, int64_t inner) = 0;
  // sums = [sum grad_y, sum grad_y * (x - mean)] per channel.
  virtual void batch_norm_backward_reduce(Tensor& sums, const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                                          int64_t N, int64_t C, int64_t inner) = 0;
  // grad_x = k * (grad_y - sums[0] / count - (x - mean) * invstd^2 * sums[1] / count), k = invstd * weight;
  // sums undefined: zero (eval mode).
  virtual void batch_norm_backward_elemt(Tensor& grad_x, const Tensor& grad_y, const Tensor& x, const Tensor& mean,
                                         const Tensor& invstd, const Tensor& weight, const Tensor& sums, double count,
                                         int64_t N, int64_t C, int64_t inner) = 0;
  // out = each window's maximum, and indices (int64, as out) the flat position in x of the cell that
  // holds it: the first NaN, else the first maximum in row-major window order (PyTorch's indices).
  // x contiguous and floating.
  virtual void max_pool2d(Tensor& out, Tensor& indices, const Tensor& x, const MaxPool2dArgs& args) = 0;
  // out (one element) = -scale * sum_i logp[i, target[i]]; logp [N, C], target int64 [N].
  // A target outside [0, C) is an error.
  virtual void nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) = 0;
  // grad_logp (zero-filled here) [i, target[i]] = -scale * grad_out[0].
  virtual void nll_loss_backward(Tensor& grad_logp, const Tensor& grad_out, const Tensor& target, double scale) = 0;
  // torch.optim.SGD's update for one parameter, in place (see optim/sgd.h for the rule).
  virtual void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
                        double dampening, double weight_decay, bool nesterov, bool first_step) = 0;
  // torch.optim.Adam/AdamW's update for one parameter, in place (tensor/optim_step.h's adam_update on
  // every element; optim/adam.h states the rule). All five tensors are contiguous, of one floating dtype
  // and distinct; max_exp_avg_sq is used only with args.amsgrad.
  virtual void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                         Tensor& max_exp_avg_sq, const AdamStepArgs& args) = 0;
  // The optimizer-step table's row `rule` (tensor/optim_step.h: Adagrad, RMSprop) for one parameter, in
  // place: param and the states the rule uses (states[i], in its order; the others may be undefined)
  // updated from grad, all contiguous, of one floating dtype and distinct; 16-bit ones computed in float32.
  virtual void optim_step(OptimRule rule, Tensor& param, const Tensor& grad, std::array<Tensor*, 3> states,
                          const OptimStepArgs& args) = 0;
  // out (contiguous, float32 or float64; on CUDA also 16-bit, drawn in float32 and rounded) =
  // low + (high - low) * u, element i's u drawn by Philox from (seed, counter + i) (tensor/philox.h):
  // rand() on a device, which draws there instead of copying host draws over.
  virtual void uniform(Tensor& out, double low, double high, uint64_t seed, uint64_t counter) = 0;
  // out (as uniform's) = mean + std * z, element i's z drawn by Box-Muller from Philox (seed, counter + i)
  // (tensor/philox.h's philox_normal, in the compute dtype): randn() and normal() on a device.
  virtual void normal(Tensor& out, double mean, double std, uint64_t seed, uint64_t counter) = 0;
  // dropout's mask on a device, as uniform draws u: out = 1 / (1 - p) where u >= p, else 0 (u in the
  // compute dtype), so a 16-bit input needs no float32 draws beside it.
  virtual void dropout_mask(Tensor& out, double p, uint64_t seed, uint64_t counter) = 0;
  // bernoulli(p) on a device, as uniform draws u: out = 1 where u < p, else 0, elementwise (out and p
  // contiguous, of one floating dtype; u in the compute dtype, so a 16-bit p is compared exactly).
  virtual void bernoulli(Tensor& out, const Tensor& p, uint64_t seed, uint64_t counter) = 0;

  // One time step of an LSTM layer over `rows` rows of n units, each element by tensor/rnn_cell_ops.h's
  // rule: gates [rows, 4n] holds h_prev W_hh^T on entry and, after x_gates [rows, 4n] is added, the
  // activations i, f, g, o on return (saved for the backward); c = f c_prev + i g, h = o tanh(c), all
  // [rows, n]. Each tensor is contiguous (views into a layer's buffers, with offsets).
  virtual void lstm_cell(Tensor& gates, Tensor& h, Tensor& c, const Tensor& x_gates, const Tensor& c_prev,
                         int64_t rows, int64_t n) = 0;
  // Its backward from d_h and d_c (the gradients reaching h and c from outside the step): d_gates
  // [rows, 4n] (of the pre-activations), and d_c_prev += the gradient through c = f c_prev + i g.
  virtual void lstm_cell_backward(Tensor& d_gates, Tensor& d_c_prev, const Tensor& gates, const Tensor& c_prev,
                                  const Tensor& c, const Tensor& d_h, const Tensor& d_c, int64_t rows,
                                  int64_t n) = 0;
  // One time step of a GRU layer: from x_gates = x W_ih^T + b_ih and h_gates = h_prev W_hh^T + b_hh (both
  // [rows, 3n], r, z, n), gates [rows, 3n] = the activations r, z, n (saved) and h [rows, n].
  virtual void gru_cell(Tensor& gates, Tensor& h, const Tensor& x_gates, const Tensor& h_gates,
                        const Tensor& h_prev, int64_t rows, int64_t n) = 0;
  // Its backward from d_h: d_x_gates and d_h_gates [rows, 3n], and d_h_prev += the gradient through z.
  virtual void gru_cell_backward(Tensor& d_x_gates, Tensor& d_h_gates, Tensor& d_h_prev, const Tensor& gates,
                                 const Tensor& h_gates, const Tensor& h_prev, const Tensor& d_h, int64_t rows,
                                 int64_t n) = 0;

  // Fused scaled dot-product attention (tensor/attention.h; operands, mask and dropout by
  // tensor/attention_ops.h's AttentionArgs, any strides it describes): out [B, Hq, L, Ev] and the row
  // logsumexp lse [B, Hq, L] (contiguous, -inf for a row that may attend nowhere, whose out is 0).
  virtual void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& mask, const AttentionArgs& args) = 0;
  // Its gradients from grad_out, given out and lse: dq (zero-filled here), dk and dv.
  virtual void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& grad_out, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
                                  const Tensor& lse, const AttentionArgs& args) = 0;
};

// A device's kernels: the core list (memory, copies, elementwise, GEMM, reductions, scans, index and
// sort), which everything else in lockstep is built on, plus the fused kernels above. Both are pure
// virtual: a new device fills both lists.
class Backend : public FusedKernels {
 public:

  // Memory. Blocks from allocate() are at least 64-byte aligned.
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
  // Contiguous bytes between this backend's device and the host or itself (same dtype and numel).
  virtual void copy(Tensor& dst, const Tensor& src) = 0;
  // Waits for every queued kernel on `device`.
  virtual void synchronize(Device device) = 0;
  // Hands every block the device's allocator keeps for reuse back to the system (the CPU's block cache,
  // CUDA's caching allocator), as torch.cuda.empty_cache.
  virtual void empty_cache(Device device) = 0;

  // --- elementwise, any strides (plan operands: out, inputs...) ---
  virtual void fill(const StridedPlan& p, Tensor& out, double value) = 0;
  // out = a converted to out's dtype (every dtype pair, bfloat16 included).
  virtual void copy_(const StridedPlan& p, Tensor& out, const Tensor& a) = 0;
  // `params`: the row's scalars (tensor/elementwise_ops.h), for the rows that have any.
  virtual void unary(UnaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const OpScalars& params = {}) = 0;
  // a and b of one dtype; on the CPU also a bfloat16 or float16 one beside a float32 one.
  virtual void binary(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const Tensor& b,
                      const OpScalars& params = {}) = 0;
  // out = a (op) s, or s (op) a with `reverse` (plan operands: out, a).
  virtual void binary_scalar(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, double s,
                             bool reverse, const OpScalars& params = {}) = 0;
  // out = cond ? a : b, cond bool.
  virtual void where(const StridedPlan& p, Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) = 0;

  // --- contiguous kernels ---
  // Matrix products (float32/float64; on the CPU also bfloat16 a and b into a bfloat16 or float32 out,
  // accumulated in float32); a, b, out may be any tensors the GemmArgs describe.
  virtual void gemm(Tensor& out, const Tensor& a, const Tensor& b, const GemmArgs& args) = 0;
  // a viewed as [outer, n, inner], reduced over n (n > 0) into out [outer, inner] by the row's rule in
  // tensor/reduce_ops.h (its accumulator, its NaN rule). Index rows (argmax, argmin) write int64.
  virtual void reduce(Reduction op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) = 0;
  // a viewed as [outer, n, inner], scanned along n (n > 0) into out (a's shape and dtype) by the row's
  // rule in tensor/scan_ops.h: out[o, k, i] is the rule over a[o, 0..k, i], or with `reverse` over
  // a[o, k..n-1, i], taken from the end (a scan's gradient is a reversed scan: no flipped copies). Index
  // rows (cummax, cummin) also write the int64 position of each value into `indices` ([outer, n, inner]);
  // the others leave it undefined.
  virtual void scan(Scan op, Tensor& out, Tensor& indices, const Tensor& a, int64_t outer, int64_t n,
                    int64_t inner, bool reverse) = 0;
  // a [outer, n, inner], index int64 [k]: out [outer, k, inner] = a[:, index[j], :].
  virtual void index_select(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n,
                            int64_t inner) = 0;
  // out [outer, n, inner] [:, index[j], :] += src [outer, k, inner] [:, j, :].
  virtual void index_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                         int64_t inner) = 0;
  // a [outer, n, inner], index and out [outer, k, inner]: out[o, j, i] = a[o, index[o, j, i], i].
  virtual void gather(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n, int64_t inner) = 0;
  // out [outer, n, inner] [o, index[o, j, i], i] += src[o, j, i]; src [outer, k, inner], index the same or
  // [outer, k] (one index per row of inner elements: index[o, j] for every i).
  virtual void scatter_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                           int64_t inner) = 0;
  // out [outer, n, inner] [o, index[o, j, i], i] = rule(that element, src[o, j, i]) by row `op` of
  // tensor/scatter_ops.h (scatter_, scatter_reduce_'s prod, amax, amin); src and index as scatter_add's.
  virtual void scatter(Scatter op, Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                       int64_t inner) = 0;
  // Each row of a [rows, n] sorted (stable) into values and int64 indices, both [rows, n].
  virtual void sort(Tensor& values, Tensor& indices, const Tensor& a, int64_t rows, int64_t n, bool descending) = 0;
 protected:
  // For a gemm that does not take the bias itself: C = beta * C + bias (rows broadcast; C is not read
  // when beta is 0) through this backend's elementwise kernels, and the args for the product to add
  // onto it (beta 1, no bias).
  GemmArgs gemm_bias_first(Tensor& out, const GemmArgs& g);
};

// The backend for a device type. CUDA registers itself when lockstep is built with it; asking for
// it otherwise throws "lockstep was built without CUDA".
Backend& backend_for(DeviceType type);
inline Backend& backend_for(Device d) { return backend_for(d.type); }
void register_backend(DeviceType type, Backend* backend);
bool has_backend(DeviceType type);

// Backend::supports for `device`'s backend: the question the ops and layers ask instead of testing the device.
inline bool supports(Device device, Capability c, Dtype dtype) { return backend_for(device).supports(c, dtype); }

// The cached blocks of `device`'s allocator handed back (Backend::empty_cache): worth calling after a
// one-off change of sizes, such as fully_shard freeing the full parameters.
inline void empty_cache(Device device) { backend_for(device).empty_cache(device); }

}  // namespace lockstep
