// TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer, TransformerDecoder and the
// encoder-decoder Transformer, as torch.nn's, with LibTorch's options and PyTorch's submodule names (self_attn, multihead_attn,
// linear1, linear2, norm1..norm3; layers.0..., norm), so state dicts move both ways:
//   nn::TransformerEncoder encoder(nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(256, 8)
//                                      .dim_feedforward(1024).activation("gelu").batch_first(true)
//                                      .norm_first(true)),
//                                  6, nn::LayerNorm(nn::LayerNormOptions(256)));
//   Tensor y = encoder(x, nn::generate_square_subsequent_mask(T), padding);   // x [N, T, 256]
// Masks are MultiheadAttention's (nn/multihead_attention.h): bool true or -inf marks what may not be
// attended. A layer with norm_first computes x + sa(norm1(x)), then x + ff(norm2(x)); without it,
// norm1(x + sa(x)), then norm2(x + ff(x)); the decoder layer puts cross-attention on memory between
// the two (norm2) and the feed-forward last (norm3).
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/containers.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/multihead_attention.h"
#include "nn/normalization.h"
#include "tensor/factory.h"

namespace lockstep::nn {

// The feed-forward activation: "relu", "gelu" or any function of a tensor (PyTorch's string or callable).
class TransformerActivation {
 public:
  TransformerActivation(const char* name) : name_(name) {}       // NOLINT: implicit, as activation("gelu")
  TransformerActivation(std::string name) : name_(std::move(name)) {}  // NOLINT
  template <typename F>
    requires std::is_invocable_r_v<Tensor, F, const Tensor&> && (!std::convertible_to<F, std::string>) &&
             (!std::same_as<std::decay_t<F>, TransformerActivation>)
  TransformerActivation(F fn) : name_("function"), fn_(std::move(fn)) {}  // NOLINT
  const std::string& name() const { return name_; }
  bool valid() const { return fn_ || name_ == "relu" || name_ == "gelu"; }
  Tensor operator()(const Tensor& x) const;

 private:
  std::string name_;
  std::function<Tensor(const Tensor&)> fn_;
};

#define LOCKSTEP_TRANSFORMER_LAYER_OPTIONS(Name)                                \
  struct Name {                                                                \
    Name(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {} \
    LOCKSTEP_ARG(int64_t, d_model, 0);                                         \
    LOCKSTEP_ARG(int64_t, nhead, 0);                                           \
    LOCKSTEP_ARG(int64_t, dim_feedforward, 2048);                              \
    LOCKSTEP_ARG(double, dropout, 0.1);                                        \
    LOCKSTEP_ARG(TransformerActivation, activation, "relu");                   \
    LOCKSTEP_ARG(double, layer_norm_eps, 1e-5);                                \
    LOCKSTEP_ARG(bool, batch_first, false);                                    \
    LOCKSTEP_ARG(bool, norm_first, false);                                     \
    LOCKSTEP_ARG(bool, bias, true); /* every Linear, LayerNorm and attention */ \
  }
LOCKSTEP_TRANSFORMER_LAYER_OPTIONS(TransformerEncoderLayerOptions);
LOCKSTEP_TRANSFORMER_LAYER_OPTIONS(TransformerDecoderLayerOptions);
#undef LOCKSTEP_TRANSFORMER_LAYER_OPTIONS

// Self-attention and a feed-forward block (linear2(dropout(activation(linear1(x))))), each with its
// residual connection, dropout (dropout1, dropout2) and LayerNorm.
class TransformerEncoderLayerImpl : public Module {
 public:
  explicit TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options);
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayerImpl(TransformerEncoderLayerOptions(d_model, nhead)) {}
  // src [S, N, E] ([N, S, E] with batch_first, [S, E] unbatched); src_mask [S, S] or [N * nhead, S, S];
  // src_key_padding_mask [N, S]; is_causal: the causal mask (src_mask may be it, or absent).
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) { return forward(src, Tensor()); }  // what Sequential and Module::forward run

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn{nullptr};
  Linear linear1{nullptr}, linear2{nullptr};
  Dropout dropout{nullptr}, dropout1{nullptr}, dropout2{nullptr};
  LayerNorm norm1{nullptr}, norm2{nullptr};
};
LOCKSTEP_MODULE(TransformerEncoderLayer);

// Self-attention, cross-attention on memory (multihead_attn) and the feed-forward block.
class TransformerDecoderLayerImpl : public Module {
 public:
  explicit TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& options);
  TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerDecoderLayerImpl(TransformerDecoderLayerOptions(d_model, nhead)) {}
  // tgt [T, N, E], memory [S, N, E] (batch first / unbatched as the encoder layer's); tgt_mask [T, T],
  // memory_mask [T, S] (or per batch and head), key padding masks [N, T] and [N, S].
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);

  TransformerDecoderLayerOptions options;
  MultiheadAttention self_attn{nullptr}, multihead_attn{nullptr};
  Linear linear1{nullptr}, linear2{nullptr};
  Dropout dropout{nullptr}, dropout1{nullptr}, dropout2{nullptr}, dropout3{nullptr};
  LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
};
LOCKSTEP_MODULE(TransformerDecoderLayer);

// num_layers copies of encoder_layer (each with its own parameters, all starting from encoder_layer's
// values, as PyTorch's deep copies; encoder_layer itself is not part of the stack), then norm if given.
struct TransformerEncoderOptions {
  TransformerEncoderOptions(TransformerEncoderLayer encoder_layer, int64_t num_layers)
      : encoder_layer_(std::move(encoder_layer)), num_layers_(num_layers) {}
  LOCKSTEP_ARG(TransformerEncoderLayer, encoder_layer, nullptr);
  LOCKSTEP_ARG(int64_t, num_layers, 0);
  LOCKSTEP_ARG(LayerNorm, norm, nullptr);
};

class TransformerEncoderImpl : public Module {
 public:
  explicit TransformerEncoderImpl(const TransformerEncoderOptions& options);
  TransformerEncoderImpl(TransformerEncoderLayer encoder_layer, int64_t num_layers, LayerNorm norm = nullptr)
      : TransformerEncoderImpl(TransformerEncoderOptions(std::move(encoder_layer), num_layers).norm(std::move(norm))) {}
  // As TransformerEncoderLayer's forward, through every layer.
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) { return forward(src, Tensor()); }

  ModuleList layers{nullptr};  // "layers.0", "layers.1", ...
  LayerNorm norm{nullptr};
  int64_t num_layers;

 private:
  std::vector<TransformerEncoderLayer> typed_;  // layers' entries, as their type
};
LOCKSTEP_MODULE(TransformerEncoder);

struct TransformerDecoderOptions {
  TransformerDecoderOptions(TransformerDecoderLayer decoder_layer, int64_t num_layers)
      : decoder_layer_(std::move(decoder_layer)), num_layers_(num_layers) {}
  LOCKSTEP_ARG(TransformerDecoderLayer, decoder_layer, nullptr);
  LOCKSTEP_ARG(int64_t, num_layers, 0);
  LOCKSTEP_ARG(LayerNorm, norm, nullptr);
};

class TransformerDecoderImpl : public Module {
 public:
  explicit TransformerDecoderImpl(const TransformerDecoderOptions& options);
  TransformerDecoderImpl(TransformerDecoderLayer decoder_layer, int64_t num_layers, LayerNorm norm = nullptr)
      : TransformerDecoderImpl(TransformerDecoderOptions(std::move(decoder_layer), num_layers).norm(std::move(norm))) {}
  // As TransformerDecoderLayer's forward, through every layer (each attends to the same memory).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);

  ModuleList layers{nullptr};
  LayerNorm norm{nullptr};
  int64_t num_layers;

 private:
  std::vector<TransformerDecoderLayer> typed_;
};
LOCKSTEP_MODULE(TransformerDecoder);

// [sz, sz] of `options`' dtype (float32 by default): 0 on and below the diagonal, -inf above, as
// nn.Transformer.generate_square_subsequent_mask (the causal mask, in additive form).
Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions options = {});

// nn.Transformer's arguments: the layers' (TransformerEncoderLayerOptions') and the two stacks' depths;
// custom_encoder and custom_decoder replace the stacks built from them.
struct TransformerOptions {
  TransformerOptions(int64_t d_model = 512, int64_t nhead = 8) : d_model_(d_model), nhead_(nhead) {}
  TransformerOptions(int64_t d_model, int64_t nhead, int64_t num_encoder_layers, int64_t num_decoder_layers)
      : d_model_(d_model), nhead_(nhead), num_encoder_layers_(num_encoder_layers),
        num_decoder_layers_(num_decoder_layers) {}
  LOCKSTEP_ARG(int64_t, d_model, 512);
  LOCKSTEP_ARG(int64_t, nhead, 8);
  LOCKSTEP_ARG(int64_t, num_encoder_layers, 6);
  LOCKSTEP_ARG(int64_t, num_decoder_layers, 6);
  LOCKSTEP_ARG(int64_t, dim_feedforward, 2048);
  LOCKSTEP_ARG(double, dropout, 0.1);
  LOCKSTEP_ARG(TransformerActivation, activation, "relu");
  LOCKSTEP_ARG(TransformerEncoder, custom_encoder, nullptr);
  LOCKSTEP_ARG(TransformerDecoder, custom_decoder, nullptr);
  LOCKSTEP_ARG(double, layer_norm_eps, 1e-5);
  LOCKSTEP_ARG(bool, batch_first, false);
  LOCKSTEP_ARG(bool, norm_first, false);
  LOCKSTEP_ARG(bool, bias, true);
};

// The encoder-decoder model of "Attention Is All You Need", as torch.nn.Transformer: encoder, a
// TransformerEncoder of num_encoder_layers layers and a final LayerNorm, and decoder, a
// TransformerDecoder of num_decoder_layers and a LayerNorm (state-dict names encoder.layers.0...,
// encoder.norm, decoder.layers.0..., decoder.norm). Every parameter of two or more dimensions is
// initialised xavier_uniform_, as PyTorch's _reset_parameters (custom stacks included).
//   nn::Transformer model(nn::TransformerOptions(256, 8, 3, 3).batch_first(true));
//   Tensor y = model(src, tgt, {}, nn::Transformer::generate_square_subsequent_mask(T));  // y [N, T, 256]
class TransformerImpl : public Module {
 public:
  explicit TransformerImpl(const TransformerOptions& options = {});
  // src [S, N, E], tgt [T, N, E] ([N, S, E], [N, T, E] with batch_first; [S, E], [T, E] unbatched) ->
  // [T, N, E] (tgt's layout). The encoder reads src with src_mask [S, S] and src_key_padding_mask [N, S];
  // the decoder tgt with tgt_mask [T, T] and tgt_key_padding_mask [N, T], and the encoder's output
  // (memory) with memory_mask [T, S] and memory_key_padding_mask [N, S]. The is_causal flags are
  // MultiheadAttention's hints (their masks must be given).
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool src_is_causal = false, bool tgt_is_causal = false, bool memory_is_causal = false);
  static Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions options = {}) {
    return nn::generate_square_subsequent_mask(sz, options);
  }

  TransformerOptions options;
  TransformerEncoder encoder{nullptr};
  TransformerDecoder decoder{nullptr};
};
LOCKSTEP_MODULE(Transformer);

}  // namespace lockstep::nn
