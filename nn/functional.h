// Stateless functions behind the modules, as torch.nn.functional (`namespace F = nn::functional;`).
// All are compositions of the differentiable ops of autograd/functions.h, so each has a gradient.
// Shape errors name the function and the shapes.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "nn/options.h"

namespace lockstep::nn {

// Options shared by each loss module and its function (F::cross_entropy(x, y, opts)).
struct CrossEntropyLossOptions {
  LOCKSTEP_ARG(Tensor, weight, Tensor());  // [C] rescaling weight per class, or undefined
  LOCKSTEP_ARG(int64_t, ignore_index, -100);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
  LOCKSTEP_ARG(double, label_smoothing, 0.0);
};
struct NLLLossOptions {
  LOCKSTEP_ARG(Tensor, weight, Tensor());
  LOCKSTEP_ARG(int64_t, ignore_index, -100);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct BCELossOptions {
  LOCKSTEP_ARG(Tensor, weight, Tensor());  // broadcast to the input; gets no gradient
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct BCEWithLogitsLossOptions {
  LOCKSTEP_ARG(Tensor, weight, Tensor());      // broadcast to the input
  LOCKSTEP_ARG(Tensor, pos_weight, Tensor());  // broadcast along the last (class) dimension
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct MSELossOptions {
  MSELossOptions() = default;
  MSELossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct L1LossOptions {
  L1LossOptions() = default;
  L1LossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct SmoothL1LossOptions {
  SmoothL1LossOptions() = default;
  SmoothL1LossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
  LOCKSTEP_ARG(double, beta, 1.0);
};
struct HuberLossOptions {
  HuberLossOptions() = default;
  HuberLossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
  LOCKSTEP_ARG(double, delta, 1.0);
};
// kl_div's reductions: Reduction's three, or nn::kBatchMean, the sum divided by the batch size (the mean KL
// divergence per sample, which 'mean', dividing by the element count, is not). A type of its own so that,
// as in LibTorch, no other loss compiles with kBatchMean.
struct BatchMean {};
inline constexpr BatchMean kBatchMean{};
class KLDivReduction {
 public:
  constexpr KLDivReduction(Reduction r) : reduction_(r) {}                       // NOLINT: as nn::kSum
  constexpr KLDivReduction(BatchMean) : reduction_(Reduction::Sum), batch_mean_(true) {}  // NOLINT
  constexpr bool batch_mean() const { return batch_mean_; }
  constexpr Reduction reduction() const { return reduction_; }  // Sum for kBatchMean, divided afterwards
  bool operator==(const KLDivReduction&) const = default;

 private:
  Reduction reduction_;
  bool batch_mean_ = false;
};
struct KLDivLossOptions {
  KLDivLossOptions() = default;
  KLDivLossOptions(KLDivReduction r) : reduction_(r) {}  // NOLINT
  KLDivLossOptions(Reduction r) : reduction_(r) {}       // NOLINT: F::kl_div(x, y, nn::kSum)
  KLDivLossOptions(BatchMean r) : reduction_(r) {}       // NOLINT: F::kl_div(x, y, nn::kBatchMean)
  LOCKSTEP_ARG(KLDivReduction, reduction, Reduction::Mean);
  LOCKSTEP_ARG(bool, log_target, false);
};
struct PoissonNLLLossOptions {
  LOCKSTEP_ARG(bool, log_input, true);
  LOCKSTEP_ARG(bool, full, false);
  LOCKSTEP_ARG(double, eps, 1e-8);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
// torch.nn.GaussianNLLLoss's keywords (LibTorch has no such loss).
struct GaussianNLLLossOptions {
  LOCKSTEP_ARG(bool, full, false);
  LOCKSTEP_ARG(double, eps, 1e-6);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct MarginRankingLossOptions {
  LOCKSTEP_ARG(double, margin, 0.0);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct HingeEmbeddingLossOptions {
  LOCKSTEP_ARG(double, margin, 1.0);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct CosineEmbeddingLossOptions {
  LOCKSTEP_ARG(double, margin, 0.0);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct SoftMarginLossOptions {
  SoftMarginLossOptions() = default;
  SoftMarginLossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct MultiLabelSoftMarginLossOptions {
  LOCKSTEP_ARG(Tensor, weight, Tensor());  // [C] per class, or undefined
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct MultiMarginLossOptions {
  LOCKSTEP_ARG(int64_t, p, 1);  // 1 or 2
  LOCKSTEP_ARG(double, margin, 1.0);
  LOCKSTEP_ARG(Tensor, weight, Tensor());  // [C] per class, or undefined; gets no gradient
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct MultiLabelMarginLossOptions {
  MultiLabelMarginLossOptions() = default;
  MultiLabelMarginLossOptions(Reduction r) : reduction_(r) {}  // NOLINT
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct TripletMarginLossOptions {
  LOCKSTEP_ARG(double, margin, 1.0);
  LOCKSTEP_ARG(double, p, 2.0);
  LOCKSTEP_ARG(double, eps, 1e-6);
  LOCKSTEP_ARG(bool, swap, false);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};
struct TripletMarginWithDistanceLossOptions {
  using distance_function_t = std::function<Tensor(const Tensor&, const Tensor&)>;
  LOCKSTEP_ARG(std::optional<distance_function_t>, distance_function, std::nullopt);  // pairwise_distance when unset
  LOCKSTEP_ARG(double, margin, 1.0);
  LOCKSTEP_ARG(bool, swap, false);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
};

}  // namespace lockstep::nn

namespace lockstep::nn::functional {

// --- convolution and pooling (nn/conv.cpp, nn/pooling.cpp); inputs [N, C, H, W] or [C, H, W] ---
// input [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] or undefined
// -> [N, C_out, H_out, W_out], H_out = (H + 2 padding - dilation (kH - 1) - 1) / stride + 1.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), ExpandingArray<2> stride = 1,
              ExpandingArray<2> padding = 0, ExpandingArray<2> dilation = 1, int64_t groups = 1);
// Pads the last two dimensions: left/right on W, top/bottom on H, with `value` (torch's F.pad with
// (left, right, top, bottom)); non-negative pads. F::pad (nn/padding.h) has the other modes.
Tensor pad2d(const Tensor& input, int64_t left, int64_t right, int64_t top, int64_t bottom, double value = 0);
// stride defaults to kernel_size (0 means "kernel_size").
Tensor max_pool2d(const Tensor& input, ExpandingArray<2> kernel_size, ExpandingArray<2> stride = 0,
                  ExpandingArray<2> padding = 0, ExpandingArray<2> dilation = 1, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, ExpandingArray<2> kernel_size, ExpandingArray<2> stride = 0,
                  ExpandingArray<2> padding = 0, bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& input, ExpandingArray<2> output_size);

// --- normalization and embedding (nn/normalization.cpp, nn/embedding.cpp) ---
// Normalizes over the last normalized_shape.size() dimensions (biased variance).
Tensor layer_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// torch.nn.functional.rms_norm; eps unset: the input dtype's machine epsilon.
Tensor rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);
Tensor local_response_norm(const Tensor& input, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);
// input [N, C, ...]. With `training`, normalizes by the batch statistics over all dimensions but 1 and,
// when running_mean/running_var are defined, updates them in place: r = (1 - momentum) r + momentum s
// (unbiased variance for running_var); otherwise normalizes by running_mean/running_var.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
// Rows of weight [num_embeddings, dim] at input's indices (int64, any shape) -> [..., dim]. The row at
// padding_idx (if >= 0) gets no gradient.
Tensor embedding(const Tensor& input, const Tensor& weight, int64_t padding_idx = -1);

// --- activations and dropout ---
inline Tensor relu(const Tensor& x) { return lockstep::relu(x); }
inline Tensor gelu(const Tensor& x, const std::string& approximate = "none") { return lockstep::gelu(x, approximate); }
inline Tensor silu(const Tensor& x) { return lockstep::silu(x); }
inline Tensor tanh(const Tensor& x) { return lockstep::tanh(x); }
inline Tensor sigmoid(const Tensor& x) { return lockstep::sigmoid(x); }
inline Tensor softmax(const Tensor& x, int64_t dim) { return lockstep::softmax(x, dim); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return lockstep::log_softmax(x, dim); }
inline Tensor dropout(const Tensor& x, double p = 0.5, bool training = true) { return lockstep::dropout(x, p, training); }
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor()) { return lockstep::linear(x, w, b); }
// int64 rows with a 1 at each class (autograd/composite.cpp), as torch::nn::functional::one_hot.
inline Tensor one_hot(const Tensor& t, int64_t num_classes = -1) { return lockstep::one_hot(t, num_classes); }

// --- attention (nn/attention.cpp) ---
// torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale + mask) v, with
// q [..., L, E], k [..., S, E], v [..., S, Ev] (batch dimensions broadcast) -> [..., L, Ev]. scale
// defaults to 1 / sqrt(E). attn_mask broadcasts to [..., L, S]: bool (true: may attend) or of q's dtype
// (added to the scores). is_causal lets row i attend to columns j <= i (the top-left triangle; it
// excludes attn_mask). dropout_p > 0 drops attention weights, as PyTorch's function does whatever the
// module's mode (pass 0 in evaluation). enable_gqa: k and v may have fewer heads (dimension -3) than q,
// each serving Hq / Hkv consecutive query heads.
// 3-D or 4-D operands with one batch run the fused kernels (tensor/attention.h: FlashAttention-2, the
// [L, S] weights never stored; a row that may attend nowhere gives 0; bfloat16 and float16 read and
// written as such, computed in float32); others the composed path below. Dropout's mask is the same Philox draw on both paths.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    bool enable_gqa = false);

// --- losses (nn/loss.cpp), with PyTorch's semantics ---
// input [N, C] or [N, C, d1, ...] logits; target int64 class indices [N] / [N, d1, ...] (entries equal
// to ignore_index contribute nothing, and 'mean' divides by the summed weight of the others), or
// class probabilities of input's shape. label_smoothing e mixes the target with the uniform
// distribution: loss = (1 - e) nll + e (-sum_c w_c logp_c / C).
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& options = {});
// input [N, C] or [N, C, d1, ...] log-probabilities; target int64 [N] / [N, d1, ...].
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {});
// Stable sigmoid + binary cross entropy; target of input's shape with values in [0, 1].
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsLossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& options = {});
// On probabilities, as F.binary_cross_entropy: loss = -w (y max(log x, -100) + (1 - y) max(log(1 - x), -100));
// input outside [0, 1] is an error (checked on the CPU). Gradient, as PyTorch's:
// d/dx = w (x - y) / max((1 - x) x, 1e-12), d/dy = w (max(log(1 - x), -100) - max(log x, -100)).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BCELossOptions& options = {});
inline Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                                   Reduction reduction = Reduction::Mean) {
  return binary_cross_entropy(input, target, BCELossOptions().weight(weight).reduction(reduction));
}

// --- regression and likelihood losses (nn/loss_regression.cpp) ---
// input and target broadcast, as PyTorch's (which warns when their sizes differ, as the broadcast is
// rarely meant); 'mean' divides by the broadcast element count. d = input - target.
// |d|.
Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossOptions& options = {});
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; beta = 0 is l1_loss, beta < 0 an error.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossOptions& options = {});
// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), i.e. delta * smooth_l1_loss(beta = delta); delta > 0.
Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossOptions& options = {});
// input log-probabilities, target probabilities (log-probabilities with log_target), broadcast:
// target (log target - input), 0 where target = 0; log_target: exp(target) (target - input). Where a
// target is 0 its gradient here is -input, where PyTorch's is NaN.
Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivLossOptions& options = {});
// Poisson negative log likelihood of target (counts), broadcast: exp(input) - target input with log_input,
// else input - target log(input + eps); full adds Stirling's approximation of log(target!),
// target log target - target + 0.5 log(2 pi target), where target > 1.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNLLLossOptions& options = {});
// Gaussian negative log likelihood, 0.5 (log var + (input - target)^2 / var) (+ 0.5 log(2 pi) with full);
// input and target broadcast. var has input's shape, or input's without its last dimension, or input's
// with one dimension 1 (a variance shared along it); a negative var is an error. var is clamped at eps for
// the value while its gradient passes as if unclamped: PyTorch clamps it in place under no_grad.
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                         const GaussianNLLLossOptions& options = {});
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, double var,
                         const GaussianNLLLossOptions& options = {});

// --- margin and embedding losses (nn/loss_margin.cpp); targets of 1 / -1 are floating-point ---
// max(0, -target (input1 - input2) + margin); the three of one rank, broadcast.
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                           const MarginRankingLossOptions& options = {});
// input where target != -1, plus max(0, margin - input) where target != 1; broadcast.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, const HingeEmbeddingLossOptions& options = {});
// Rows input1, input2 [N, D] with target [N], or vectors [D] with target []: 1 - cos where target = 1,
// max(0, cos - margin) where target = -1 (0 elsewhere), cos = x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)).
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             const CosineEmbeddingLossOptions& options = {});
// log(1 + exp(-target input)); broadcast.
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, const SoftMarginLossOptions& options = {});
// Classes along the last dimension: per sample, the mean over classes of weight * the binary cross entropy of
// sigmoid(input) with target in [0, 1]; 'none' keeps the other dimensions ([N] for [N, C]).
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target,
                                   const MultiLabelSoftMarginLossOptions& options = {});
// input [N, C] (target int64 [N]) or [C] (target [] or [1]): per sample
// sum_{j != y} weight_y max(0, margin - x_y + x_j)^p / C, p 1 or 2.
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, const MultiMarginLossOptions& options = {});
// input [N, C] or [C], target int64 of its shape: a sample's classes are its target's entries up to the first
// -1. Per sample sum_{j target} sum_{k not target} max(0, 1 - (x_j - x_k)) / C; a class listed twice counts
// twice, as in PyTorch's kernel.
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target,
                              const MultiLabelMarginLossOptions& options = {});
// max(0, margin + d(anchor, positive) - d(anchor, negative)), d = pairwise_distance(p, eps); with swap,
// d(anchor, negative) becomes min(d(anchor, negative), d(positive, negative)). margin > 0; one rank, broadcast.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossOptions& options = {});
// The same with any distance_function (pairwise_distance by default).
Tensor triplet_margin_with_distance_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                                         const TripletMarginWithDistanceLossOptions& options = {});

}  // namespace lockstep::nn::functional

namespace lockstep::nn::detail {
// The losses' shared rules (nn/loss.cpp). A per-element loss reduced as `reduction` says.
Tensor reduce_loss(const Tensor& loss, Reduction reduction);
// The checks of a loss on two operands that broadcast: both defined and on one device, `a` floating-point.
// Returns the broadcast shape, or fails naming fn, both operands' shapes and the first dimension that differs.
Shape check_broadcast(const char* fn, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b);
// max(x, min) whose gradient passes everywhere, as PyTorch's in-place clamp_ under no_grad on a clone
// (gaussian_nll_loss's var, cosine_similarity's norms): the value is guarded, the gradient left as it was.
Tensor clamp_min_keeping_grad(const Tensor& x, double min);
// F::scaled_dot_product_attention composed from the differentiable ops (matmul, masked_fill, softmax,
// matmul: nanoGPT's manual path, storing the weights): the fused kernels' reference, and the path for
// what they do not take. A row that may attend nowhere gives NaN here.
Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                         bool is_causal = false, std::optional<double> scale = std::nullopt,
                                         bool enable_gqa = false);
}  // namespace lockstep::nn::detail
