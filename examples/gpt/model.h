// GPT: nanoGPT's model (karpathy/nanoGPT model.py) in lockstep, with its parameter names, so a
// state_dict saved here loads into nanoGPT's GPT and back: transformer.wte / wpe (token and position
// embeddings), transformer.h.<i> blocks of pre-LayerNorm causal self-attention (ln_1, attn.c_attn,
// attn.c_proj) and a GELU MLP (ln_2, mlp.c_fc, mlp.c_proj), transformer.ln_f, and lm_head, whose weight
// is tied to transformer.wte.weight (parameters() yields it once, under the embedding's name).
//
//   GPT model(GPTConfig{.vocab_size = 65});
//   auto [logits, loss] = model(idx, targets);   // idx, targets: int64 [B, T]; logits [B, T, vocab]
//   Tensor more = model->generate(idx, 100, 0.8, 200);
#pragma once

#include <cstdint>
#include <utility>

#include "nn/api.h"

namespace lockstep::examples {

struct GPTConfig {
  int64_t block_size = 64;  // the longest context
  int64_t vocab_size = 0;
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears and LayerNorms, as GPT-2
  void check() const;  // throws, naming the bad field, for sizes that cannot build a model
};

// Self-attention over the positions up to each one: heads of size n_embd / n_head in one batched product.
class CausalSelfAttentionImpl : public nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GPTConfig& config);
  Tensor forward(const Tensor& x);  // x: [B, T, C] -> [B, T, C]

  nn::Linear c_attn{nullptr}, c_proj{nullptr};
  nn::Dropout attn_dropout{nullptr}, resid_dropout{nullptr};
  int64_t n_head, n_embd;
};
LOCKSTEP_MODULE(CausalSelfAttention);

class MLPImpl : public nn::Module {
 public:
  explicit MLPImpl(const GPTConfig& config);
  Tensor forward(const Tensor& x);  // [B, T, C] -> c_fc [B, T, 4C] -> GELU -> c_proj [B, T, C]

  nn::Linear c_fc{nullptr}, c_proj{nullptr};
  nn::GELU gelu{nullptr};
  nn::Dropout dropout{nullptr};
};
LOCKSTEP_MODULE(MLP);

class BlockImpl : public nn::Module {
 public:
  explicit BlockImpl(const GPTConfig& config);
  Tensor forward(const Tensor& x);  // x + attn(ln_1(x)), then + mlp(ln_2(x))

  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  MLP mlp{nullptr};
};
LOCKSTEP_MODULE(Block);

// nanoGPT's `transformer` ModuleDict as a module of its own, so the names read transformer.h.0...
class TransformerImpl : public nn::Module {
 public:
  explicit TransformerImpl(const GPTConfig& config);
  nn::Embedding wte{nullptr}, wpe{nullptr};
  nn::Dropout drop{nullptr};
  nn::ModuleList h{nullptr};
  nn::LayerNorm ln_f{nullptr};
};
LOCKSTEP_MODULE(Transformer);

class GPTImpl : public nn::Module {
 public:
  // Builds the model with nanoGPT's initialisation from the default generator (manual_seed): every
  // Linear and Embedding weight normal(0, 0.02), biases zero, and each residual projection
  // (c_proj.weight) normal(0, 0.02 / sqrt(2 n_layer)).
  explicit GPTImpl(const GPTConfig& config);

  // idx, targets: int64 [B, T] with T <= block_size. Returns logits [B, T, vocab] and the mean
  // cross-entropy over every position (targets of -1 are ignored, as nanoGPT's).
  std::pair<Tensor, Tensor> forward(const Tensor& idx, const Tensor& targets);
  // Logits of the last position only, [B, 1, vocab]: what generation needs.
  Tensor forward(const Tensor& idx);

  // Appends max_new_tokens tokens to idx [B, T], each drawn (multinomial, default generator) from the
  // softmax of the last logits / temperature, restricted to the top_k most likely when top_k > 0. The
  // context is cropped to the last block_size tokens. Runs without gradients, in eval mode.
  Tensor generate(Tensor idx, int64_t max_new_tokens, double temperature = 1.0, int64_t top_k = 0);

  // Parameters, with the position embeddings' left out unless non_embedding is false (as nanoGPT).
  int64_t num_params(bool non_embedding = true) const;

  const GPTConfig config;
  Transformer transformer{nullptr};
  nn::Linear lm_head{nullptr};

 private:
  Tensor hidden(const Tensor& idx);  // the final LayerNorm's output [B, T, C]
};
LOCKSTEP_MODULE(GPT);

}  // namespace lockstep::examples
