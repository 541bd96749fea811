// Stateless functions behind the modules, as torch.nn.functional (`namespace F = nn::functional;`).
// All are compositions of the differentiable ops of autograd/functions.h, so each has a gradient.
// Shape errors name the function and the shapes.
#pragma once

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

}  // namespace lockstep::nn

namespace lockstep::nn::functional {

// --- convolution and pooling (nn/conv.cpp, nn/pooling.cpp); inputs [N, C, H, W] or [C, H, W] ---
// input [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] or undefined
// -> [N, C_out, H_out, W_out], H_out = (H + 2 padding - dilation (kH - 1) - 1) / stride + 1.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), ExpandingArray<2> stride = 1,
              ExpandingArray<2> padding = 0, ExpandingArray<2> dilation = 1, int64_t groups = 1);
// Pads the last two dimensions: left/right on W, top/bottom on H, with `value` (torch's F.pad with
// (left, right, top, bottom)).
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

}  // namespace lockstep::nn::functional

namespace lockstep::nn::detail {
// F::scaled_dot_product_attention composed from the differentiable ops (matmul, masked_fill, softmax,
// matmul: nanoGPT's manual path, storing the weights): the fused kernels' reference, and the path for
// what they do not take. A row that may attend nowhere gives NaN here.
Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                         bool is_causal = false, std::optional<double> scale = std::nullopt,
                                         bool enable_gqa = false);
}  // namespace lockstep::nn::detail
