// MultiheadAttention, as torch.nn.MultiheadAttention, with LibTorch's options and forward and PyTorch's
// parameter names, shapes and initialisation, so state dicts move both ways:
//   in_proj_weight [3E, E] and in_proj_bias [3E] (q, k, v packed in that order), or q_proj_weight [E, E],
//   k_proj_weight [E, kdim], v_proj_weight [E, vdim] when kdim or vdim differ from E; bias_k and bias_v
//   [1, 1, E] (add_bias_kv); out_proj, a Linear(E, E) (out_proj.weight, out_proj.bias).
//
//   nn::MultiheadAttention attn(nn::MultiheadAttentionOptions(256, 8).dropout(0.1).batch_first(true));
//   auto [out, weights] = attn(x, x, x);                       // out [N, L, 256], weights [N, L, L]
//   auto [y, none] = attn(q, k, v, pad, /*need_weights=*/false);  // scaled_dot_product_attention's path
// Its forward is F::multi_head_attention_forward over the module's parameters, as PyTorch's.
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

namespace functional {
// LibTorch's F::multi_head_attention_forward options: the module's parameters passed in, in its order.
struct MultiheadAttentionForwardFuncOptions {
  MultiheadAttentionForwardFuncOptions(int64_t embed_dim_to_check, int64_t num_heads, Tensor in_proj_weight,
                                       Tensor in_proj_bias, Tensor bias_k, Tensor bias_v, bool add_zero_attn,
                                       double dropout_p, Tensor out_proj_weight, Tensor out_proj_bias)
      : embed_dim_to_check_(embed_dim_to_check), num_heads_(num_heads), in_proj_weight_(std::move(in_proj_weight)),
        in_proj_bias_(std::move(in_proj_bias)), bias_k_(std::move(bias_k)), bias_v_(std::move(bias_v)),
        add_zero_attn_(add_zero_attn), dropout_p_(dropout_p), out_proj_weight_(std::move(out_proj_weight)),
        out_proj_bias_(std::move(out_proj_bias)) {}
  LOCKSTEP_ARG(int64_t, embed_dim_to_check, 0);
  LOCKSTEP_ARG(int64_t, num_heads, 0);
  LOCKSTEP_ARG(Tensor, in_proj_weight, {});  // [3E, E]; undefined with use_separate_proj_weight
  LOCKSTEP_ARG(Tensor, in_proj_bias, {});    // [3E] or undefined
  LOCKSTEP_ARG(Tensor, bias_k, {});          // [1, 1, E] or undefined
  LOCKSTEP_ARG(Tensor, bias_v, {});
  LOCKSTEP_ARG(bool, add_zero_attn, false);
  LOCKSTEP_ARG(double, dropout_p, 0.0);
  LOCKSTEP_ARG(Tensor, out_proj_weight, {});  // [E, E]
  LOCKSTEP_ARG(Tensor, out_proj_bias, {});    // [E] or undefined
  LOCKSTEP_ARG(bool, training, true);
  LOCKSTEP_ARG(Tensor, key_padding_mask, {});
  LOCKSTEP_ARG(bool, need_weights, true);
  LOCKSTEP_ARG(Tensor, attn_mask, {});
  LOCKSTEP_ARG(bool, use_separate_proj_weight, false);
  LOCKSTEP_ARG(Tensor, q_proj_weight, {});  // [E, E], [E, kdim], [E, vdim] with use_separate_proj_weight
  LOCKSTEP_ARG(Tensor, k_proj_weight, {});
  LOCKSTEP_ARG(Tensor, v_proj_weight, {});
  LOCKSTEP_ARG(Tensor, static_k, {});  // [N * num_heads, S, head_dim]: the keys, instead of projecting key
  LOCKSTEP_ARG(Tensor, static_v, {});
  LOCKSTEP_ARG(bool, average_attn_weights, true);
  LOCKSTEP_ARG(bool, is_causal, false);  // PyTorch's hint that attn_mask is the causal mask
};
// torch.nn.functional.multi_head_attention_forward: query [L, N, E], key [S, N, kdim], value [S, N, vdim]
// (sequence first; [L, E] ... unbatched) -> (output [L, N, E], attention weights as MultiheadAttention's).
std::tuple<Tensor, Tensor> multi_head_attention_forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                        const MultiheadAttentionForwardFuncOptions& options);
}  // namespace functional

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
  std::string label_;  // "MultiheadAttention(embed_dim=8, num_heads=2)", for messages; made once
};
LOCKSTEP_MODULE(MultiheadAttention);

}  // namespace lockstep::nn
