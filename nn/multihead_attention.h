// MultiheadAttention, as torch.nn.MultiheadAttention, with LibTorch's options and forward and PyTorch's
// parameter names, shapes and initialisation, so state dicts move both ways:
//   in_proj_weight [3E, E] and in_proj_bias [3E] (q, k, v packed in that order), or q_proj_weight [E, E],
//   k_proj_weight [E, kdim], v_proj_weight [E, vdim] when kdim or vdim differ from E; bias_k and bias_v
//   [1, 1, E] (add_bias_kv); out_proj, a Linear(E, E) (out_proj.weight, out_proj.bias).
//
//   nn::MultiheadAttention attn(nn::MultiheadAttentionOptions(256, 8).dropout(0.1).batch_first(true));
//   auto [out, weights] = attn(x, x, x);                       // out [N, L, 256], weights [N, L, L]
//   auto [y, none] = attn(q, k, v, pad, /*need_weights=*/false);  // scaled_dot_product_attention's path
//
// Masks, as PyTorch's: key_padding_mask [N, S] ([S] unbatched) and attn_mask [L, S] or [N * num_heads, L, S];
// a bool mask marks the positions that may NOT be attended (the opposite of scaled_dot_product_attention's
// bool mask), a floating one is added to the scores. is_causal is PyTorch's hint that attn_mask is the causal
// mask: it needs attn_mask (an error without it, as PyTorch's).
#pragma once

#include <string>
#include <tuple>

#include "nn/linear.h"
#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads), kdim_(embed_dim), vdim_(embed_dim) {}
  LOCKSTEP_ARG(int64_t, embed_dim, 0);
  LOCKSTEP_ARG(int64_t, num_heads, 0);
  LOCKSTEP_ARG(double, dropout, 0.0);  // on the attention weights, in training
  LOCKSTEP_ARG(bool, bias, true);      // in_proj_bias and out_proj.bias
  LOCKSTEP_ARG(bool, add_bias_kv, false);    // a learned key and value appended to every sequence
  LOCKSTEP_ARG(bool, add_zero_attn, false);  // a zero key and value appended after the heads are split
  LOCKSTEP_ARG(int64_t, kdim, 0);            // the key's features (embed_dim unless set)
  LOCKSTEP_ARG(int64_t, vdim, 0);            // the value's features (embed_dim unless set)
  LOCKSTEP_ARG(bool, batch_first, false);    // [N, L, E] instead of [L, N, E]
};

class MultiheadAttentionImpl : public Module {
 public:
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  // PyTorch's _reset_parameters: xavier_uniform_ on the input projections (the packed one as one
  // matrix), zeros for in_proj_bias and out_proj.bias, xavier_normal_ for bias_k and bias_v;
  // out_proj.weight keeps Linear's initialisation.
  void reset_parameters();

  // query [L, N, E], key [S, N, kdim], value [S, N, vdim] ([N, L, E] ... with batch_first; [L, E] ...
  // unbatched) -> (output of query's layout, attention weights [N, L, S] averaged over the heads or
  // [N, num_heads, L, S], undefined unless need_weights). S counts the keys bias_k and add_zero_attn
  // append. need_weights=false runs F::scaled_dot_product_attention; there, without key padding,
  // is_causal reaches it as its is_causal and attn_mask is taken to be the causal mask (as PyTorch does).
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);

  MultiheadAttentionOptions options;
  int64_t embed_dim, kdim, vdim, num_heads, head_dim;
  Tensor in_proj_weight;                              // [3E, E]; undefined when kdim or vdim differ from E
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // defined only when kdim or vdim differ from E
  Tensor in_proj_bias;                                // [3E] (bias)
  Tensor bias_k, bias_v;                              // [1, 1, E] (add_bias_kv)
  Linear out_proj{nullptr};

 private:
  std::string label_;  // "MultiheadAttention(embed_dim=8, num_heads=2)", for messages
};
LOCKSTEP_MODULE(MultiheadAttention);

}  // namespace lockstep::nn
