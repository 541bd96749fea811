// Fused scaled dot-product attention in the ops layer: softmax(scale q k^T + mask) v in one kernel
// each way (FlashAttention-2: tensor/cpu/attention.cpp, tensor/cuda/attention.cu), keeping only the
// output and each row's logsumexp, never the [L, S] weights. nn::functional::scaled_dot_product_attention
// checks the user's operands (naming them) and records the autograd node; the composed path there is
// the reference these kernels are tested against.
#pragma once

#include <cstdint>

#include "tensor/attention_ops.h"
#include "tensor/tensor.h"

namespace lockstep::internal {

struct AttentionParams {
  double scale = 1;
  bool is_causal = false;  // query row i sees key columns j <= i; excludes a mask
  double dropout_p = 0;    // with seed and offset: attention_keep's draw (tensor/attention_ops.h)
  uint64_t seed = 0, offset = 0;
};

// q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev] of one floating dtype and device (bfloat16 and
// float16 are read and written as such and computed in float32),
// any strides (an operand whose last dimension is strided is copied), Hq a multiple of Hkv; mask
// undefined, bool (true: may attend) or floating (added to the scores), broadcastable to [B, Hq, L, S].
struct AttentionResult {
  Tensor out;  // [B, Hq, L, Ev], stored as [B, L, Hq, Ev]: the heads side by side, as a GPT joins them
  Tensor lse;  // [B, Hq, L], contiguous, float32 for 16-bit q: log sum_j exp(score), -inf where a row may
               // attend nowhere
};
AttentionResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                  const AttentionParams& p);

// The gradients of q, k and v (their shapes; stored heads-inner as out is) from grad_out [B, Hq, L, Ev],
// given the forward's operands and result. The dropout mask is drawn again from p's seed and offset.
struct AttentionGrads {
  Tensor q, k, v;
};
AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, const AttentionResult& forward, const AttentionParams& p);

// The dropout mask the fused kernels apply to attention weights of `shape` (contiguous [..., L, S],
// element index as attention_keep's): 1 / (1 - dropout_p) where kept, else 0. For the composed path.
Tensor attention_dropout_mask(const Shape& shape, double dropout_p, uint64_t seed, uint64_t offset, Dtype dtype,
                              Device device);

}  // namespace lockstep::internal
