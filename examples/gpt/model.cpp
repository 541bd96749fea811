// GPT: nanoGPT's modules, forward, initialisation and generation. PyTorch's lines are in the comments
// where the port is not word for word.
#include "examples/gpt/model.h"

#include "autograd/gelu_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lockstep::examples {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

void GPTConfig::check() const {
  LOCKSTEP_CHECK(vocab_size > 0, "GPT: vocab_size must be positive, got ", vocab_size);
  LOCKSTEP_CHECK(block_size > 0, "GPT: block_size must be positive, got ", block_size);
  LOCKSTEP_CHECK(n_layer > 0 && n_head > 0 && n_embd > 0, "GPT: n_layer, n_head and n_embd must be positive, got ",
                 n_layer, ", ", n_head, ", ", n_embd);
  LOCKSTEP_CHECK(n_embd % n_head == 0, "GPT: n_embd (", n_embd, ") must be a multiple of n_head (", n_head, ")");
  LOCKSTEP_CHECK(dropout >= 0 && dropout < 1, "GPT: dropout must be in [0, 1), got ", dropout);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& c)
    : Module("CausalSelfAttention"), n_head(c.n_head), n_embd(c.n_embd) {
  c_attn = register_module("c_attn", nn::Linear(nn::LinearOptions(c.n_embd, 3 * c.n_embd).bias(c.bias)));
  c_proj = register_module("c_proj", nn::Linear(nn::LinearOptions(c.n_embd, c.n_embd).bias(c.bias)));
  attn_dropout = register_module("attn_dropout", nn::Dropout(c.dropout));
  resid_dropout = register_module("resid_dropout", nn::Dropout(c.dropout));
}

Tensor CausalSelfAttentionImpl::forward(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  std::vector<Tensor> qkv = c_attn(x).split(n_embd, 2);  // q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
  Tensor q = qkv[0].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
  Tensor k = qkv[1].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
  Tensor v = qkv[2].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
  // nanoGPT's flash path: one fused kernel each way over the strided views, no (B, nh, T, T) weights.
  const double p = is_training() ? attn_dropout->p : 0.0;
  Tensor y = nn::functional::scaled_dot_product_attention(q, k, v, Tensor(), p, /*is_causal=*/true);
  y = y.transpose(1, 2).contiguous().view({B, T, C});  // the heads side by side again (stored so: no copy)
  return resid_dropout(c_proj(y));
}

MLPImpl::MLPImpl(const GPTConfig& c) : Module("MLP") {
  c_fc = register_module("c_fc", nn::Linear(nn::LinearOptions(c.n_embd, 4 * c.n_embd).bias(c.bias)));
  gelu = register_module("gelu", nn::GELU());
  c_proj = register_module("c_proj", nn::Linear(nn::LinearOptions(4 * c.n_embd, c.n_embd).bias(c.bias)));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
}

// dropout(c_proj(gelu(c_fc(x)))), with the GELU and c_proj as one recorded op that keeps the GELU's input
// only (autograd/gelu_linear.h): the MLP saves one [B, T, 4C] activation for backward instead of two.
Tensor MLPImpl::forward(const Tensor& x) {
  return dropout(gelu_linear(c_fc(x), c_proj->weight, c_proj->bias, gelu->options.approximate()));
}

BlockImpl::BlockImpl(const GPTConfig& c) : Module("Block") {
  ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions(c.n_embd).bias(c.bias)));
  attn = register_module("attn", CausalSelfAttention(c));
  ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions(c.n_embd).bias(c.bias)));
  mlp = register_module("mlp", MLP(c));
}

Tensor BlockImpl::forward(const Tensor& x) {
  Tensor h = x + attn(ln_1(x));
  return h + mlp(ln_2(h));
}

TransformerImpl::TransformerImpl(const GPTConfig& c) : Module("Transformer") {
  wte = register_module("wte", nn::Embedding(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", nn::Embedding(c.block_size, c.n_embd));
  drop = register_module("drop", nn::Dropout(c.dropout));
  h = register_module("h", nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(Block(c));
  ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions(c.n_embd).bias(c.bias)));
}

GPTImpl::GPTImpl(const GPTConfig& c) : Module("GPT"), config((c.check(), c)) {
  transformer = register_module("transformer", Transformer(c));
  lm_head = register_module("lm_head", nn::Linear(nn::LinearOptions(c.n_embd, c.vocab_size).bias(false)));
  // self.transformer.wte.weight = self.lm_head.weight: one tensor, yielded once by parameters().
  lm_head->weight = lm_head->register_parameter("weight", transformer->wte->weight);

  // self.apply(self._init_weights), then the scaled residual projections.
  NoGradGuard no_grad;
  apply([](nn::Module& m) {
    if (auto* l = m.as<nn::Linear>()) {
      nn::init::normal_(l->weight, 0.0, 0.02);
      if (l->bias.defined()) nn::init::zeros_(l->bias);
    } else if (auto* e = m.as<nn::Embedding>()) {
      nn::init::normal_(e->weight, 0.0, 0.02);
    }
  });
  for (auto& [name, p] : named_parameters())
    if (name.ends_with("c_proj.weight")) nn::init::normal_(p, 0.0, 0.02 / std::sqrt(2.0 * c.n_layer));
}

Tensor GPTImpl::hidden(const Tensor& idx) {
  LOCKSTEP_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "GPT::forward: idx must be int64 [B, T], got ",
                 idx.dtype(), " ", idx.shape());
  const int64_t T = idx.size(1);
  LOCKSTEP_CHECK(T >= 1 && T <= config.block_size, "GPT::forward: cannot forward a sequence of length ", T,
                 ", block size is only ", config.block_size);
  Tensor pos = arange(0, T, 1, TensorOptions(kInt64, idx.device()));  // (T)
  Tensor x = transformer->drop(transformer->wte(idx) + transformer->wpe(pos));  // (B, T, C) + (T, C)
  for (const auto& block : *transformer->h) x = block->forward(x);
  return transformer->ln_f(x);
}

std::pair<Tensor, Tensor> GPTImpl::forward(const Tensor& idx, const Tensor& targets) {
  LOCKSTEP_CHECK(targets.shape() == idx.shape() && targets.dtype() == kInt64, "GPT::forward: targets must be int64 ",
                 idx.shape(), " as idx, got ", targets.dtype(), " ", targets.shape());
  Tensor logits = lm_head(hidden(idx));  // (B, T, vocab)
  const int64_t V = logits.size(-1);
  Tensor loss = nn::functional::cross_entropy(logits.view({-1, V}), targets.reshape({-1}),
                                              nn::CrossEntropyLossOptions().ignore_index(-1));
  return {logits, loss};
}

Tensor GPTImpl::forward(const Tensor& idx) {
  Tensor x = hidden(idx);
  return lm_head(x.slice(1, x.size(1) - 1, x.size(1)));  // x[:, [-1], :]: (B, 1, vocab)
}

Tensor GPTImpl::generate(Tensor idx, int64_t max_new_tokens, double temperature, int64_t top_k) {
  LOCKSTEP_CHECK(max_new_tokens >= 0, "GPT::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  LOCKSTEP_CHECK(temperature > 0, "GPT::generate: temperature must be positive, got ", temperature);
  LOCKSTEP_CHECK(top_k >= 0, "GPT::generate: top_k must be >= 0 (0: no limit), got ", top_k);
  NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t T = idx.size(1);
    Tensor cond = T <= config.block_size ? idx : idx.slice(1, T - config.block_size, T);
    Tensor logits = forward(cond).select(1, 0) * (1.0 / temperature);  // (B, vocab)
    if (top_k > 0) {
      Tensor kth = topk(logits, std::min(top_k, logits.size(-1))).first;  // (B, k), descending
      logits = logits.masked_fill(logits < kth.slice(1, kth.size(1) - 1, kth.size(1)), -kInf);
    }
    Tensor next = multinomial(softmax(logits, -1), 1);  // (B, 1)
    idx = cat({idx, next}, 1);
  }
  train(was_training);
  return idx;
}

int64_t GPTImpl::num_params(bool non_embedding) const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return non_embedding ? n - transformer->wpe->weight.numel() : n;
}

}  // namespace lockstep::examples
