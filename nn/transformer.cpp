// The Transformer layers and stacks: compositions of MultiheadAttention, Linear, Dropout and LayerNorm in
// PyTorch's registration order (so parameters() and state_dict() list them as its do).
#include "nn/transformer.h"

#include <limits>
#include <sstream>
#include <tuple>

#include "autograd/functions.h"
#include "nn/init.h"

namespace lockstep::nn {

Tensor TransformerActivation::operator()(const Tensor& x) const {
  if (fn_) return fn_(x);
  if (name_ == "relu") return relu(x);
  if (name_ == "gelu") return gelu(x);
  fail("Transformer layer: activation should be \"relu\" or \"gelu\" (or a function), not \"", name_, "\"");
}

namespace {

// "TransformerEncoderLayer(d_model=8, nhead=2)", for messages.
template <typename Options>
std::string describe(const char* layer, const Options& o) {
  std::ostringstream s;
  s << layer << "(d_model=" << o.d_model() << ", nhead=" << o.nhead() << ")";
  return s.str();
}

template <typename Options>
void check_options(const char* layer, const Options& o) {
  LOCKSTEP_CHECK(o.d_model() > 0 && o.nhead() > 0 && o.dim_feedforward() > 0, describe(layer, o),
                 ": d_model, nhead and dim_feedforward must be positive, got dim_feedforward ", o.dim_feedforward());
  LOCKSTEP_CHECK(o.d_model() % o.nhead() == 0, describe(layer, o), ": d_model ", o.d_model(),
                 " must be divisible by nhead ", o.nhead());
  LOCKSTEP_CHECK(o.dropout() >= 0 && o.dropout() <= 1, describe(layer, o), ": dropout must be in [0, 1], got ",
                 o.dropout());
  LOCKSTEP_CHECK(o.activation().valid(), describe(layer, o),
                 ": activation should be \"relu\" or \"gelu\" (or a function), not \"", o.activation().name(), "\"");
}

// x is [S, N, E], [N, S, E] or [S, E] with E = d_model.
template <typename Options>
void check_input(const char* layer, const Options& o, const char* what, const Tensor& x) {
  const int64_t d = o.d_model();
  LOCKSTEP_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3) && x.size(-1) == d, describe(layer, o), ": expected ",
                 what, " [S, N, ", d, "] ([N, S, ", d, "] with batch_first, [S, ", d, "] unbatched), got ",
                 x.defined() ? x.shape() : Shape{});
}

template <typename Options>
MultiheadAttention attention(const Options& o) {
  return MultiheadAttention(MultiheadAttentionOptions(o.d_model(), o.nhead())
                                .dropout(o.dropout())
                                .bias(o.bias())
                                .batch_first(o.batch_first()));
}
template <typename Options>
LayerNorm layer_norm(const Options& o) {
  return LayerNorm(LayerNormOptions(o.d_model()).eps(o.layer_norm_eps()).bias(o.bias()));
}

// num_layers new layers of the prototype's options, type and device, each loaded with its values.
template <typename Layer>
std::vector<Layer> copies(const Layer& prototype, int64_t num_layers, const char* stack) {
  LOCKSTEP_CHECK(!prototype.is_empty(), stack, ": the layer to copy is an empty holder");
  LOCKSTEP_CHECK(num_layers >= 0, stack, ": num_layers must be non-negative, got ", num_layers);
  const Tensor& w = prototype->linear1->weight;
  NamedTensors state = prototype->state_dict();
  std::vector<Layer> out;
  for (int64_t i = 0; i < num_layers; ++i) {
    Layer layer(prototype->options);
    layer->to(w.dtype());
    layer->to(w.device());
    layer->load_state_dict(state);
    layer->train(prototype->is_training());
    out.push_back(layer);
  }
  return out;
}

}  // namespace

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& o)
    : Module("TransformerEncoderLayer"), options(o) {
  check_options("TransformerEncoderLayer", o);
  self_attn = register_module("self_attn", attention(o));
  linear1 = register_module("linear1", Linear(LinearOptions(o.d_model(), o.dim_feedforward()).bias(o.bias())));
  dropout = register_module("dropout", Dropout(o.dropout()));
  linear2 = register_module("linear2", Linear(LinearOptions(o.dim_feedforward(), o.d_model()).bias(o.bias())));
  norm1 = register_module("norm1", layer_norm(o));
  norm2 = register_module("norm2", layer_norm(o));
  dropout1 = register_module("dropout1", Dropout(o.dropout()));
  dropout2 = register_module("dropout2", Dropout(o.dropout()));
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask, bool is_causal) {
  check_input("TransformerEncoderLayer", options, "src", src);
  auto sa = [&](const Tensor& x) {
    return dropout1(std::get<0>(self_attn(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal)));
  };
  auto ff = [&](const Tensor& x) { return dropout2(linear2(dropout(options.activation()(linear1(x))))); };
  Tensor x = src;
  if (options.norm_first()) {
    x = x + sa(norm1(x));
    return x + ff(norm2(x));
  }
  x = norm1(x + sa(x));
  return norm2(x + ff(x));
}

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& o)
    : Module("TransformerDecoderLayer"), options(o) {
  check_options("TransformerDecoderLayer", o);
  self_attn = register_module("self_attn", attention(o));
  multihead_attn = register_module("multihead_attn", attention(o));
  linear1 = register_module("linear1", Linear(LinearOptions(o.d_model(), o.dim_feedforward()).bias(o.bias())));
  dropout = register_module("dropout", Dropout(o.dropout()));
  linear2 = register_module("linear2", Linear(LinearOptions(o.dim_feedforward(), o.d_model()).bias(o.bias())));
  norm1 = register_module("norm1", layer_norm(o));
  norm2 = register_module("norm2", layer_norm(o));
  norm3 = register_module("norm3", layer_norm(o));
  dropout1 = register_module("dropout1", Dropout(o.dropout()));
  dropout2 = register_module("dropout2", Dropout(o.dropout()));
  dropout3 = register_module("dropout3", Dropout(o.dropout()));
}

Tensor TransformerDecoderLayerImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                            const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                            const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                            bool memory_is_causal) {
  check_input("TransformerDecoderLayer", options, "tgt", tgt);
  check_input("TransformerDecoderLayer", options, "memory", memory);
  auto sa = [&](const Tensor& x) {
    return dropout1(std::get<0>(self_attn(x, x, x, tgt_key_padding_mask, false, tgt_mask, true, tgt_is_causal)));
  };
  auto mha = [&](const Tensor& x) {
    return dropout2(std::get<0>(
        multihead_attn(x, memory, memory, memory_key_padding_mask, false, memory_mask, true, memory_is_causal)));
  };
  auto ff = [&](const Tensor& x) { return dropout3(linear2(dropout(options.activation()(linear1(x))))); };
  Tensor x = tgt;
  if (options.norm_first()) {
    x = x + sa(norm1(x));
    x = x + mha(norm2(x));
    return x + ff(norm3(x));
  }
  x = norm1(x + sa(x));
  x = norm2(x + mha(x));
  return norm3(x + ff(x));
}

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderOptions& o)
    : Module("TransformerEncoder"), num_layers(o.num_layers()) {
  typed_ = copies(o.encoder_layer(), o.num_layers(), "TransformerEncoder");
  layers = register_module("layers", ModuleList());
  for (const auto& layer : typed_) layers->push_back(layer);
  if (o.norm()) norm = register_module("norm", o.norm());
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                       bool is_causal) {
  Tensor x = src;
  for (auto& layer : typed_) x = layer->forward(x, mask, src_key_padding_mask, is_causal);
  return norm ? norm(x) : x;
}

TransformerDecoderImpl::TransformerDecoderImpl(const TransformerDecoderOptions& o)
    : Module("TransformerDecoder"), num_layers(o.num_layers()) {
  typed_ = copies(o.decoder_layer(), o.num_layers(), "TransformerDecoder");
  layers = register_module("layers", ModuleList());
  for (const auto& layer : typed_) layers->push_back(layer);
  if (o.norm()) norm = register_module("norm", o.norm());
}

Tensor TransformerDecoderImpl::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                       const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                       const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                       bool memory_is_causal) {
  Tensor x = tgt;
  for (auto& layer : typed_)
    x = layer->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                       memory_is_causal);
  return norm ? norm(x) : x;
}

TransformerImpl::TransformerImpl(const TransformerOptions& o) : Module("Transformer"), options(o) {
  auto layer = [&](auto layer_options) {
    return layer_options.dim_feedforward(o.dim_feedforward())
        .dropout(o.dropout())
        .activation(o.activation())
        .layer_norm_eps(o.layer_norm_eps())
        .batch_first(o.batch_first())
        .norm_first(o.norm_first())
        .bias(o.bias());
  };
  auto norm = [&] { return LayerNorm(LayerNormOptions(o.d_model()).eps(o.layer_norm_eps()).bias(o.bias())); };
  encoder = register_module(
      "encoder", o.custom_encoder() ? o.custom_encoder()
                                    : TransformerEncoder(TransformerEncoderLayer(layer(TransformerEncoderLayerOptions(
                                                             o.d_model(), o.nhead()))),
                                                         o.num_encoder_layers(), norm()));
  decoder = register_module(
      "decoder", o.custom_decoder() ? o.custom_decoder()
                                    : TransformerDecoder(TransformerDecoderLayer(layer(TransformerDecoderLayerOptions(
                                                             o.d_model(), o.nhead()))),
                                                         o.num_decoder_layers(), norm()));
  for (Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor TransformerImpl::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                                const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                                const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask,
                                bool src_is_causal, bool tgt_is_causal, bool memory_is_causal) {
  LOCKSTEP_CHECK(src.defined() && tgt.defined(), "Transformer: src and tgt must be defined");
  LOCKSTEP_CHECK(src.dim() == tgt.dim() && (src.dim() == 2 || src.dim() == 3), "Transformer: expected src and tgt ",
                 "both [S, N, E] ([N, S, E] with batch_first) or both [S, E] (unbatched), got ", src.shape(), " and ",
                 tgt.shape());
  const int batch_dim = options.batch_first() ? 0 : 1;
  LOCKSTEP_CHECK(src.dim() == 2 || src.size(batch_dim) == tgt.size(batch_dim),
                 "Transformer: the batch number of src ", src.shape(), " and tgt ", tgt.shape(), " must be equal",
                 options.batch_first() ? " (batch_first: dimension 0)" : " (dimension 1)");
  LOCKSTEP_CHECK(src.size(-1) == options.d_model() && tgt.size(-1) == options.d_model(),
                 "Transformer: the feature number of src ", src.shape(), " and tgt ", tgt.shape(),
                 " must be equal to d_model ", options.d_model());
  const Tensor memory = encoder(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                 memory_is_causal);
}

Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions options) {
  LOCKSTEP_CHECK(sz >= 0, "generate_square_subsequent_mask: size must be non-negative, got ", sz);
  LOCKSTEP_CHECK(is_floating_point(options.dtype),
                 "generate_square_subsequent_mask: dtype must be floating point, got ", options.dtype);
  const Tensor above = triu(ones({sz, sz}, {kBool, options.device}), 1);
  return zeros({sz, sz}, options).masked_fill(above, -std::numeric_limits<double>::infinity());
}

}  // namespace lockstep::nn
