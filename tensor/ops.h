// Raw tensor operations, for lockstep's own layers (autograd builds every differentiable op on these;
// nn, optim and distributed use them for work outside the graph). They check their inputs (shapes,
// dtypes, devices), allocate the result and run the device's kernel (tensor/backend.h); none records a
// graph. Users call the differentiable ops in namespace lockstep (autograd/functions.h) instead.
//
// Results are new contiguous tensors, except the views (views.cpp: they share storage) and the
// functions ending in an underscore (in place, on any layout).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace lockstep::internal {

// --- checks and plans (ops.cpp) ---
// The errors every op raises for an undefined operand, or operands on two devices; `op` names the caller.
void check_defined(const Tensor& t, const char* op);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_floating(const Tensor& a, const char* op);  // float32, float64 or bfloat16
// Resolves a negative dimension and checks the range; `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// The [outer, n, inner] view of `shape` around dimension `dim`.
void split_dim(const Shape& shape, int64_t dim, int64_t& outer, int64_t& n, int64_t& inner);
// The broadcast shape of a and b by NumPy's rules; `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
Strides contiguous_strides(const Shape& shape);
// The loop over `out` with each input broadcast to out's shape (inputs must broadcast to it).
StridedPlan make_plan(const Tensor& out, std::initializer_list<const Tensor*> inputs, const char* op);

// --- views (views.cpp): share storage, copy nothing ---
Tensor as_strided(const Tensor& a, const Shape& shape, const Strides& strides, int64_t storage_offset);
Tensor view(const Tensor& a, const Shape& shape);     // throws when the strides allow no view
Tensor reshape(const Tensor& a, const Shape& shape);  // a view when possible, else a contiguous copy
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor transpose(const Tensor& a);  // 2-D
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor expand(const Tensor& a, const Shape& shape);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& a, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a);
// A contiguous view of `base`'s elements [offset, offset + numel(shape)), shaped `shape`; base must be
// contiguous. DistributedDataParallel's buckets hand out such views of one flat buffer.
Tensor view_range(const Tensor& base, int64_t offset, const Shape& shape);
Tensor contiguous(const Tensor& a);  // a itself when already contiguous

// --- elementwise (ops.cpp); operands of different dtypes are promoted (promote_types) ---
Tensor unary(UnaryOp op, const Tensor& a, const OpScalars& params = {});
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const OpScalars& params = {});
// a (op) s; with `reverse`, s (op) a.
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool reverse = false, const OpScalars& params = {});
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);  // bool
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor abs(const Tensor& a);

// --- copies and conversion (ops.cpp) ---
Tensor to_dtype(const Tensor& a, Dtype dtype);     // a itself when the dtype already matches
Tensor to_device(const Tensor& a, Device device);  // a itself when already there
Tensor clone(const Tensor& a);                     // contiguous
// dst = src, src broadcast to dst's shape and converted to its dtype; any devices, any layouts.
void copy_(Tensor& dst, const Tensor& src);
void fill_(Tensor& t, double value);
// a += alpha * b, b broadcast to a's shape.
void add_(Tensor& a, const Tensor& b, double alpha = 1.0);
void mul_(Tensor& a, double s);
// True when every element differs by at most atol + rtol * |b| (compared on the host).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// --- reductions (reduce.cpp). Over all elements the result has shape []. ---
Tensor reduce(Reduction op, const Tensor& a, int64_t dim, bool keepdim, const char* name);
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);  // {} = all
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
// Products accumulate as sums do (double for floating, int64 for integers; tensor/reduce_ops.h).
Tensor prod(const Tensor& a);
Tensor prod(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);  // int64
// Sums `a` down to `shape`, undoing a broadcast (the gradient of a broadcast input).
Tensor sum_to(const Tensor& a, const Shape& shape);
// The dims of `dims` wrapped and sorted, all of them for {}; `op` names the caller.
std::vector<int64_t> reduction_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);
// a's shape with the reduced dims set to 1 (for broadcasting a reduction back).
Shape kept_shape(const Shape& shape, const std::vector<int64_t>& dims);

// --- scans (scan.cpp): a row of tensor/scan_ops.h along one dimension ---
// values of a's shape; indices (int64, cummax and cummin only, else undefined) the position of each
// running extreme. dtype: the values', a converted first (torch.cumsum's dtype argument); unset, the
// sums and products give bool and integer inputs int64 values, as PyTorch. reverse: each position
// scans from the end of the dimension back to itself (a scan's backward).
struct ScanResult {
  Tensor values, indices;
};
ScanResult scan(Scan op, const Tensor& a, int64_t dim, std::optional<Dtype> dtype = std::nullopt,
                bool reverse = false);

// --- fused kernels' ops: softmax.cpp, layer_norm.cpp, group_norm.cpp, max_pool2d.cpp, avg_pool2d.cpp,
// resample.cpp, nll_loss.cpp ---
Tensor softmax(const Tensor& a, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& grad_out, const Tensor& output, int64_t dim, bool log);
Tensor log_softmax(const Tensor& a, int64_t dim);
// LayerNorm over the trailing elements of x that form one normalized group of n (x viewed as
// [numel / n, n]); weight and bias hold n elements each, or are undefined. Returns (y, mean, rstd),
// mean and rstd one per row ([rows]), for the backward. bfloat16 computes in float32.
struct LayerNormResult {
  Tensor y, mean, rstd;
};
LayerNormResult layer_norm(const Tensor& x, int64_t n, const Tensor& weight, const Tensor& bias, double eps);
// Gradients of layer_norm for x, weight and bias; each is computed only where `want_*` (else undefined).
struct LayerNormGrads {
  Tensor x, weight, bias;
};
LayerNormGrads layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, int64_t n, bool want_x, bool want_weight, bool want_bias);
// GroupNorm of x [N, C, *] in `groups` groups of C / groups channels (group_norm.cpp), by the backend's
// fused kernels; weight and bias [C] or undefined. Returns (y, mean, rstd), mean and rstd [N, groups].
LayerNormResult group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps);
// Its gradients for x, weight and bias, each computed only where `want_*` (else undefined).
LayerNormGrads group_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, int64_t groups, bool want_x, bool want_weight,
                                   bool want_bias);
// Max pooling of contiguous planes (tensor/backend.h's MaxPool2dArgs; x is [..., H, W], already
// padded): (out [..., OH, OW], indices: each maximum's flat position in x, int64).
struct MaxPoolResult {
  Tensor out, indices;
};
MaxPoolResult max_pool2d(const Tensor& x, const MaxPool2dArgs& args);
// Average pooling of planes by the backend's fused kernel (tensor/backend.h's AvgPool2dArgs; x is
// [..., H, W], not padded), read and written in x's dtype with float32 sums (avg_pool2d.cpp) where the
// backend supports Capability::kAvgPool2d for x's dtype, which avg_pool2d_fused_applies says; the rest
// is composed from strided adds (nn/pooling.cpp).
bool avg_pool2d_fused_applies(const Tensor& x);
Tensor avg_pool2d_fused(const Tensor& x, const AvgPool2dArgs& args);
// Its input gradient [..., H, W] from grad_out [..., OH, OW] (each window's share, summed in float32).
Tensor avg_pool2d_fused_backward(const Tensor& grad_out, const AvgPool2dArgs& args);
// One dimension's resampling (F::interpolate's) by the backend's fused kernel (resample.cpp), where it
// supports Capability::kResample for x's dtype: x's dimension dim -> `out` positions, output o the sum
// over t < taps of weight[o * taps + t] * x[..., index[o * taps + t], ...] (weight empty: one tap of
// weight 1). The backward adds grad_y back at the positions read, into a gradient of x's shape.
struct ResampleTaps {
  int64_t taps = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
};
Tensor resample(const Tensor& x, int64_t dim, int64_t out, const ResampleTaps& taps);
Tensor resample_backward(const Tensor& grad_y, const Shape& x_shape, int64_t dim, const ResampleTaps& taps);
// CTC's negative log likelihood per sample (ctc_loss.cpp), by the forward (alpha) recursion in log space:
// log_probs [T, N, C] floating, targets int64 [N, S] or the targets concatenated [sum of target_lengths],
// lengths one per sample. Returns nll [N] (log_probs' dtype and device; inf where no alignment exists),
// and for the backward log_alpha [N, T, 2 S_max + 1] (float64) and the checked problem as read on the host.
// ctc_loss_backward: PyTorch's gradient of log_probs from grad_nll [N], by the backward (beta) recursion:
// exp(lp) - exp(log sum alpha beta + nll - lp) per class; zero_infinity zeroes the samples whose nll is
// infinite.
struct CtcProblem;
struct CtcResult {
  Tensor nll, log_alpha;
  std::shared_ptr<const CtcProblem> problem;
};
CtcResult ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                   const std::vector<int64_t>& target_lengths, int64_t blank);
Tensor ctc_loss_backward(const Tensor& grad_nll, const CtcResult& forward, bool zero_infinity);
// Mean (or sum) over the batch of -logp[i, target[i]]; logp [N, C] floating, target int64 [N].
Tensor nll_loss(const Tensor& logp, const Tensor& target, bool mean = true);
Tensor nll_loss_backward(const Tensor& grad_out, const Tensor& logp, const Tensor& target, bool mean = true);

// --- recurrent layers (rnn.cpp): all T steps of one LSTM or GRU layer and direction ---
// x_gates [T, B, G*H] holds every step's input projection (x W_ih^T plus the biases outside the
// cell), w_hh [G*H, H]; h0 (and c0) [B, H]. Steps run from t = 0 up, or from T - 1 down with
// `reverse`. States are kept in position order in T + 1 rows: h0 at row 0 and h_t at row t + 1
// (reverse: h0 at row T, h_t at row t), so the outputs are rows [1, T] ([0, T) in reverse), h_n is
// row T (row 0), and the states the steps read are rows [0, T) ([1, T]). float32 and float64.
// hc [2, T + 1, B, H]: the h rows, then the c rows; gates [T, B, 4H]: the activations i, f, g, o.
struct LSTMLayerResult {
  Tensor hc, gates;
};
LSTMLayerResult lstm_layer(const Tensor& x_gates, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                           bool reverse);
// From the gradient of hc (every row, h0's and c0's included): x_gates [T, B, 4H], h0, c0 and, where
// wanted, w_hh.
struct LSTMLayerGrads {
  Tensor x_gates, h0, c0, w_hh;
};
LSTMLayerGrads lstm_layer_backward(const Tensor& grad_hc, const Tensor& hc, const Tensor& gates, const Tensor& w_hh,
                                   bool reverse, bool want_w_hh);
// GRU: b_hh [3H] (or undefined) is added to h_prev W_hh^T at each step (its n part sits inside r * (..)).
// h [T + 1, B, H]; gates [T, B, 3H] the activations r, z, n; h_gates [T, B, 3H] = h_prev W_hh^T + b_hh.
struct GRULayerResult {
  Tensor h, gates, h_gates;
};
GRULayerResult gru_layer(const Tensor& x_gates, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh, bool reverse);
struct GRULayerGrads {
  Tensor x_gates, h0, w_hh, b_hh;
};
GRULayerGrads gru_layer_backward(const Tensor& grad_h, const Tensor& h, const Tensor& gates, const Tensor& h_gates,
                                 const Tensor& w_hh, bool reverse, bool want_w_hh, bool want_b_hh);

// --- matrix products (linalg.cpp) ---
// torch.matmul: 1-D, 2-D, batched and broadcast batch dimensions. Strided operands go to the GEMM as
// transposes or leading dimensions where the layout allows, else are made contiguous.
Tensor matmul(const Tensor& a, const Tensor& b);
// 2-D: op(a) @ op(b) with op = transpose where the flag is set (no copy).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b);
// out = alpha * op(a) @ op(b) + beta * out (+ bias [n] on every row), 2-D, in place (beta = 1 accumulates
// into out; with beta 0, out's old values are not read). 16-bit on CUDA (float32 accumulation, one rounding
// into out), not on the CPU.
void gemm_(Tensor& out, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, double alpha, double beta,
           const Tensor& bias = Tensor());

// --- indexing (indexing.cpp) ---
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);  // index int64 1-D
Tensor index_select(const Tensor& a, const Tensor& index);               // dim 0
void index_add_(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
void index_add_(Tensor& out, const Tensor& index, const Tensor& src);  // dim 0
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
void scatter_add_(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
// A scatter's index (along dim >= 0) narrowed to one entry per row when it
// repeats along every dimension after dim (stride 0 or size 1: a graph's edge targets expanded over the
// features), as the scatter kernels take it; undefined when it does not.
Tensor row_index(const Tensor& index, int64_t dim);
// out[..., index[...], ...] = rule(out there, src) by row `op` of tensor/scatter_ops.h, in place on any
// layout (as scatter_add_: index of out's rank, no larger than src, nor than out outside dim).
void scatter_(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src, Scatter op);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Sorted values and their int64 indices along `dim` (stable).
std::pair<Tensor, Tensor> sort(const Tensor& a, int64_t dim = -1, bool descending = false);
// The k largest (or smallest) along `dim`, in sorted order, and their indices.
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true);

// torch.optim.SGD's update of one parameter in place (optim/sgd.h states the rule). The momentum
// buffer is used only when momentum != 0; `first_step` initialises it with the gradient.
void sgd_step_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr, double momentum,
               double dampening, double weight_decay, bool nesterov, bool first_step);
// torch.optim.Adam/AdamW's update of one parameter in place (optim/adam.h states the rule): param,
// exp_avg, exp_avg_sq (and max_exp_avg_sq with args.amsgrad) are updated from grad in one pass.
void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& max_exp_avg_sq,
                const AdamStepArgs& args);
// Row `rule` of the optimizer-step table (tensor/optim_step.h) for one parameter in place: param and the
// rule's states (`states`, in its order; undefined where the options leave one unused) from grad.
void optim_step_(OptimRule rule, Tensor& param, const Tensor& grad, std::array<Tensor*, 3> states,
                 const OptimStepArgs& args);

}  // namespace lockstep::internal
