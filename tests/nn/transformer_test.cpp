// MultiheadAttention and the Transformer layers against PyTorch: tests/fixtures/transformer_fixtures.safetensors
// (written by tools/fixtures/make_transformer_fixtures.py) holds, per case, PyTorch's state dict, inputs,
// masks, outputs and the gradients of sum(out * g) over the outputs in float64. Each case loads the
// state dict strictly (so PyTorch's names and shapes are checked too), runs the same call and compares
// outputs and every gradient. Then a tiny ViT written with nn::TransformerEncoderLayer against its
// PyTorch twin, float64 gradcheck, dropout and modes, the layer copies of the stacks, and bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "nn/api.h"
#include "tensor/safetensors.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;

namespace {

constexpr const char* kFixtures = "tests/fixtures/transformer_fixtures.safetensors";
using Named = std::map<std::string, Tensor>;

const Named& fixtures() {
  static const Named all = [] {
    Named m;
    for (auto& [k, v] : load_safetensors(kFixtures).tensors) m.emplace(k, v);
    return m;
  }();
  return all;
}

Tensor fx(const std::string& key) {
  auto it = fixtures().find(key);
  REQUIRE_MESSAGE(it != fixtures().end(), "fixture '", key,
                  "' is missing (rerun tools/fixtures/make_transformer_fixtures.py)");
  return it->second.clone();
}

// Every fixture under `prefix`, keyed by the rest of its name.
Named under(const std::string& prefix) {
  Named out;
  for (auto& [k, v] : fixtures())
    if (k.rfind(prefix, 0) == 0) out.emplace(k.substr(prefix.size()), v.clone());
  return out;
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-9) {
  REQUIRE_MESSAGE(got.defined(), what, ": undefined");
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs PyTorch's ", want.shape());
  auto g = got.to(kFloat64).contiguous().to_vector<double>(), w = want.to(kFloat64).to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
    if (!(err <= worst)) worst = err, at = i;  // NaN counts as the worst
  }
  CHECK_MESSAGE(worst <= tol, what, ": element ", at, " is ", g[at], ", PyTorch's ", w[at]);
}

// Loads case c's state dict into m (strict, in `dtype`).
void load_case(nn::Module& m, const std::string& c, Dtype dtype = kFloat64) {
  m.to(dtype);
  nn::NamedTensors state;
  for (auto& [k, v] : under(c + ".param.")) state.emplace_back(k, v.to(dtype));
  m.load_state_dict(state);
}

using Outputs = std::map<std::string, Tensor>;
using Call = std::function<Outputs(Named& inputs, const Named& masks)>;

// Runs case c: its state dict into m, its inputs (requiring grad) and masks through `call`, then compares
// the outputs and the gradients of the inputs and of every parameter with PyTorch's.
void check_case(const std::string& c, nn::Module& m, const Call& call) {
  INFO("case ", c);
  load_case(m, c);
  Named inputs = under(c + ".in.");
  for (auto& [k, v] : inputs) v.set_requires_grad();
  const Outputs outs = call(inputs, under(c + ".mask."));
  REQUIRE(outs.size() == under(c + ".out.").size());
  Tensor loss = zeros({}, kFloat64);
  for (auto& [k, o] : outs) {
    check_close(o, fx(c + ".out." + k), c + ".out." + k);
    loss = loss + sum(o * fx(c + ".g." + k));
  }
  loss.backward();
  for (auto& [k, v] : inputs) check_close(v.grad(), fx(c + ".grad.in." + k), c + ".grad.in." + k);
  const Named grads = under(c + ".grad.param.");
  CHECK(grads.size() == m.named_parameters().size());
  for (auto& [k, p] : m.named_parameters()) check_close(p.grad(), fx(c + ".grad.param." + k), c + ".grad." + k);
}

Outputs out_and_weights(const std::tuple<Tensor, Tensor>& r) {
  return {{"out", std::get<0>(r)}, {"weights", std::get<1>(r)}};
}

// timm's VisionTransformer in miniature, as tools/fixtures/make_transformer_fixtures.py's TinyViT:
// 4x4 patches of an 8x8 image, a cls token, learned positions, 2 pre-norm GELU encoder layers, a final
// LayerNorm and a linear head on the cls token.
struct TinyViTImpl : nn::Module {
  nn::Conv2d patch_embed{nullptr};
  Tensor cls_token, pos_embed;
  nn::TransformerEncoder encoder{nullptr};
  nn::LayerNorm norm{nullptr};
  nn::Linear head{nullptr};

  TinyViTImpl(int64_t dim = 16, int64_t heads = 2, int64_t classes = 3) : Module("TinyViT") {
    patch_embed = register_module("patch_embed", nn::Conv2d(nn::Conv2dOptions(1, dim, 4).stride(4)));
    cls_token = register_parameter("cls_token", zeros({1, 1, dim}));
    pos_embed = register_parameter("pos_embed", zeros({1, 5, dim}));
    auto layer = nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(dim, heads)
                                                 .dim_feedforward(2 * dim)
                                                 .dropout(0.0)
                                                 .activation("gelu")
                                                 .batch_first(true)
                                                 .norm_first(true));
    encoder = register_module("encoder", nn::TransformerEncoder(layer, 2));
    norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions(dim).eps(1e-6)));
    head = register_module("head", nn::Linear(dim, classes));
  }
  Tensor forward(const Tensor& images) {  // [B, 1, 8, 8] -> [B, classes]
    Tensor x = patch_embed(images).flatten(2).transpose(1, 2);  // [B, 4, dim]
    x = cat({cls_token.expand({x.size(0), -1, -1}), x}, 1) + pos_embed;
    return head(norm(encoder(x)).select(1, 0));
  }
};
LOCKSTEP_MODULE(TinyViT);

}  // namespace

TEST_CASE("MultiheadAttention matches PyTorch: outputs, attention weights and every gradient") {
  SUBCASE("self-attention, sequence first, a float causal mask and key padding, weights averaged") {
    nn::MultiheadAttention m(8, 2);
    check_case("mha_self", *m, [&](Named& in, const Named& mk) {
      const Tensor& x = in["x"];
      return out_and_weights(m(x, x, x, mk.at("key_padding_mask"), true, mk.at("attn_mask")));
    });
  }
  SUBCASE("cross-attention, batch first, a bool attn_mask, weights per head") {
    nn::MultiheadAttention m(nn::MultiheadAttentionOptions(8, 2).batch_first(true));
    check_case("mha_cross_bf", *m, [&](Named& in, const Named& mk) {
      return out_and_weights(m(in["q"], in["k"], in["v"], Tensor(), true, mk.at("attn_mask"), false));
    });
  }
  SUBCASE("need_weights=false (scaled_dot_product_attention), a 3-D float mask and key padding") {
    nn::MultiheadAttention m(nn::MultiheadAttentionOptions(8, 2).batch_first(true));
    check_case("mha_sdpa", *m, [&](Named& in, const Named& mk) {
      auto [out, weights] = m(in["q"], in["k"], in["v"], mk.at("key_padding_mask"), false, mk.at("attn_mask"));
      CHECK(!weights.defined());
      return Outputs{{"out", out}};
    });
  }
  SUBCASE("kdim and vdim (q/k/v_proj_weight), add_bias_kv and add_zero_attn") {
    nn::MultiheadAttention m(nn::MultiheadAttentionOptions(8, 2).kdim(6).vdim(7).add_bias_kv(true).add_zero_attn(true));
    CHECK(!m->in_proj_weight.defined());
    check_case("mha_kvdim", *m, [&](Named& in, const Named& mk) {
      return out_and_weights(m(in["q"], in["k"], in["v"], mk.at("key_padding_mask"), true, mk.at("attn_mask")));
    });
  }
  SUBCASE("no biases, is_causal with its mask") {
    nn::MultiheadAttention m(nn::MultiheadAttentionOptions(8, 2).bias(false).batch_first(true));
    CHECK(m->named_parameters().size() == 2);  // in_proj_weight, out_proj.weight
    check_case("mha_causal_nobias", *m, [&](Named& in, const Named& mk) {
      const Tensor& x = in["x"];
      return Outputs{{"out", std::get<0>(m(x, x, x, Tensor(), false, mk.at("attn_mask"), true, true))}};
    });
  }
  SUBCASE("unbatched") {
    nn::MultiheadAttention m(8, 2);
    check_case("mha_unbatched", *m, [&](Named& in, const Named& mk) {
      return out_and_weights(m(in["q"], in["k"], in["v"], mk.at("key_padding_mask"), true, Tensor(), false));
    });
  }
}

TEST_CASE("is_causal is a hint that needs its mask, as PyTorch's: alone it is an error, with the mask it agrees") {
  nn::MultiheadAttention m(nn::MultiheadAttentionOptions(8, 2).batch_first(true));
  load_case(*m, "mha_cross_bf");
  const Tensor x = fx("mha_causal_nobias.in.x"), pad = fx("mha_self.mask.key_padding_mask");
  const Tensor causal = nn::generate_square_subsequent_mask(4, kFloat64);
  for (bool need_weights : {false, true}) {
    INFO("need_weights ", need_weights);
    // PyTorch: "Need attn_mask if specifying the is_causal hint" (torch 2.x, MultiheadAttention in training).
    testing::expect_error("is_causal alone", [&] { m(x, x, x, Tensor(), need_weights, Tensor(), true, true); },
                          {"MultiheadAttention", "is_causal", "attn_mask", "generate_square_subsequent_mask(4)"});
    check_close(std::get<0>(m(x, x, x, Tensor(), need_weights, causal, true, true)),
                std::get<0>(m(x, x, x, Tensor(), true, causal)), "is_causal with its mask", 1e-12);
    check_close(std::get<0>(m(x, x, x, pad, need_weights, causal, true, true)),
                std::get<0>(m(x, x, x, pad, true, causal)), "is_causal with key padding", 1e-12);
  }
  // The layers and stacks pass their is_causal flags to MultiheadAttention: the same error.
  auto enc_layer = nn::TransformerEncoderLayer(
      nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).batch_first(true));
  enc_layer->to(kFloat64);
  nn::TransformerEncoder encoder(enc_layer, 2);
  auto dec_layer = nn::TransformerDecoderLayer(
      nn::TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).batch_first(true));
  dec_layer->to(kFloat64);
  nn::TransformerDecoder decoder(dec_layer, 2);
  const std::initializer_list<std::string> parts = {"is_causal", "attn_mask"};
  testing::expect_error("encoder layer", [&] { enc_layer(x, Tensor(), Tensor(), true); }, parts);
  testing::expect_error("encoder", [&] { encoder(x, Tensor(), Tensor(), true); }, parts);
  testing::expect_error("decoder layer, tgt_is_causal",
                        [&] { dec_layer(x, x, Tensor(), Tensor(), Tensor(), Tensor(), true); }, parts);
  testing::expect_error("decoder layer, memory_is_causal",
                        [&] { dec_layer(x, x, causal, Tensor(), Tensor(), Tensor(), false, true); }, parts);
  testing::expect_error("decoder", [&] { decoder(x, x, Tensor(), Tensor(), Tensor(), Tensor(), true); }, parts);
  check_close(enc_layer(x, causal, Tensor(), true), enc_layer(x, causal), "encoder layer with its mask", 1e-12);
  check_close(decoder(x, x, causal, Tensor(), Tensor(), Tensor(), true), decoder(x, x, causal),
              "decoder with its mask", 1e-12);
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(nn::generate_square_subsequent_mask(3).to_vector<float>() ==
        std::vector<float>{0, -float(inf), -float(inf), 0, 0, -float(inf), 0, 0, 0});
}

// m's parameter `name`, undefined when it has none.
Tensor param_of(const nn::Module& m, const std::string& name) {
  for (const auto& [k, p] : m.named_parameters())
    if (k == name) return p;
  return Tensor();
}

TEST_CASE("Transformer (encoder-decoder) matches PyTorch: strict state dict, outputs and every gradient") {
  SUBCASE("2 + 1 post-norm ReLU layers, sequence first, padding and a causal tgt_mask") {
    nn::Transformer model(nn::TransformerOptions(8, 2, 2, 1).dim_feedforward(16).dropout(0.0));
    CHECK(param_of(*model, "encoder.norm.weight").defined());
    CHECK(param_of(*model, "decoder.layers.0.multihead_attn.in_proj_weight").defined());
    check_case("transformer", *model, [&](Named& in, const Named& mk) {
      return Outputs{{"out", model(in["src"], in["tgt"], Tensor(), mk.at("tgt_mask"), Tensor(),
                                   mk.at("src_key_padding_mask"), Tensor(), mk.at("memory_key_padding_mask"))}};
    });
  }
  SUBCASE("1 + 2 pre-norm GELU layers without biases, batch first, is_causal hints with their masks") {
    nn::Transformer model(nn::TransformerOptions(8, 2, 1, 2)
                              .dim_feedforward(12)
                              .dropout(0.0)
                              .activation("gelu")
                              .batch_first(true)
                              .norm_first(true)
                              .bias(false));
    check_case("transformer_bf", *model, [&](Named& in, const Named& mk) {
      return Outputs{{"out", model(in["src"], in["tgt"], mk.at("src_mask"), mk.at("tgt_mask"), mk.at("memory_mask"),
                                   Tensor(), Tensor(), Tensor(), true, true)}};
    });
  }
}

TEST_CASE("Transformer: PyTorch's defaults and initialisation, custom stacks, and errors naming the shapes") {
  manual_seed(5);
  nn::Transformer model(nn::TransformerOptions(16, 4, 2, 2).dim_feedforward(32));
  CHECK(model->options.dropout() == 0.1);
  CHECK(nn::TransformerOptions().d_model() == 512);
  CHECK(nn::TransformerOptions().num_encoder_layers() == 6);
  // _reset_parameters: xavier_uniform_ on every matrix, so the copied layers differ; vectors keep their
  // modules' initialisation (MultiheadAttention's in_proj_bias 0, LayerNorm's weight 1).
  const Tensor w0 = param_of(*model, "encoder.layers.0.linear1.weight"),
               w1 = param_of(*model, "encoder.layers.1.linear1.weight");
  CHECK((w0 - w1).abs().max().item<double>() > 0);
  const double bound = std::sqrt(6.0 / (16 + 32));  // xavier_uniform_ on [32, 16]
  CHECK(w0.abs().max().item<double>() <= bound);
  CHECK(w0.abs().max().item<double>() > 0.8 * bound);
  CHECK(param_of(*model, "encoder.layers.0.self_attn.in_proj_bias").abs().max().item<double>() == 0);
  CHECK((param_of(*model, "decoder.norm.weight") - 1.0).abs().max().item<double>() == 0);
  // Custom stacks replace the built ones.
  nn::TransformerEncoder enc(nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(16, 4).dim_feedforward(8)),
                             1);
  nn::Transformer custom(nn::TransformerOptions(16, 4).custom_encoder(enc).num_decoder_layers(1));
  CHECK(custom->encoder->num_layers == 1);
  CHECK(custom->decoder->num_layers == 1);
  CHECK(!param_of(*custom, "encoder.norm.weight").defined());
  model->eval();
  const Tensor src = randn({5, 2, 16}), tgt = randn({3, 2, 16});
  CHECK(model(src, tgt).shape() == Shape{3, 2, 16});
  testing::expect_error("batch", [&] { model(src, randn({3, 4, 16})); }, {"Transformer", "batch", "[5, 2, 16]", "[3, 4, 16]"});
  testing::expect_error("features", [&] { model(src, randn({3, 2, 8})); }, {"Transformer", "d_model", "16", "[3, 2, 8]"});
  testing::expect_error("dims", [&] { model(src, randn({3, 16})); }, {"Transformer", "[5, 2, 16]", "[3, 16]"});
  testing::expect_error("is_causal without its mask", [&] { model(src, tgt, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), false, true); },
                        {"is_causal", "attn_mask"});
  CHECK(nn::TransformerImpl::generate_square_subsequent_mask(2).to_vector<float>() ==
        std::vector<float>{0, -std::numeric_limits<float>::infinity(), 0, 0});
}

TEST_CASE("TransformerEncoder, TransformerDecoderLayer and TransformerDecoder match PyTorch") {
  SUBCASE("encoder: 2 post-norm ReLU layers and a final LayerNorm, causal mask and padding") {
    nn::TransformerEncoder enc(
        nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0)), 2,
        nn::LayerNorm(nn::LayerNormOptions(8)));
    check_case("encoder", *enc, [&](Named& in, const Named& mk) {
      return Outputs{{"out", enc(in["src"], mk.at("mask"), mk.at("src_key_padding_mask"))}};
    });
  }
  SUBCASE("decoder layer: post-norm ReLU, causal tgt_mask, both key padding masks") {
    nn::TransformerDecoderLayer dec(nn::TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
    check_case("decoder_layer", *dec, [&](Named& in, const Named& mk) {
      return Outputs{{"out", dec(in["tgt"], in["memory"], mk.at("tgt_mask"), Tensor(), mk.at("tgt_key_padding_mask"),
                                 mk.at("memory_key_padding_mask"))}};
    });
  }
  SUBCASE("decoder: 2 pre-norm GELU layers without biases, batch first, a float memory_mask") {
    nn::TransformerDecoder dec(nn::TransformerDecoderLayer(nn::TransformerDecoderLayerOptions(8, 2)
                                                               .dim_feedforward(16)
                                                               .dropout(0.0)
                                                               .activation("gelu")
                                                               .batch_first(true)
                                                               .norm_first(true)
                                                               .bias(false)),
                               2, nn::LayerNorm(nn::LayerNormOptions(8)));
    check_case("decoder", *dec, [&](Named& in, const Named& mk) {
      return Outputs{{"out", dec(in["tgt"], in["memory"], mk.at("tgt_mask"), mk.at("memory_mask"))}};
    });
  }
}

TEST_CASE("a tiny ViT on nn::TransformerEncoderLayer loads its PyTorch twin's state dict and gives its outputs") {
  TinyViT vit;
  check_case("vit", *vit, [&](Named& in, const Named&) { return Outputs{{"out", vit(in["images"])}}; });
  // The same weights in float32 stay within float32 rounding of PyTorch's float64 logits.
  TinyViT vit32;
  load_case(*vit32, "vit", kFloat32);
  check_close(vit32(fx("vit.in.images").to(kFloat32)), fx("vit.out.out"), "float32 logits", 1e-5);
}

TEST_CASE("float64 gradcheck of MultiheadAttention on both paths, with masks") {
  manual_seed(3);
  for (bool need_weights : {true, false}) {
    INFO("need_weights ", need_weights);
    nn::MultiheadAttention m(nn::MultiheadAttentionOptions(4, 2).batch_first(true));
    m->to(kFloat64);
    Tensor q = randn({2, 3, 4}, kFloat64), k = randn({2, 2, 4}, kFloat64), v = randn({2, 2, 4}, kFloat64);
    const Tensor pad = arange(4).view({2, 2}) == 3.0;  // batch 1 ignores its second key
    Tensor mask = randn({3, 2}, kFloat64);
    testing::gradcheck(
        [&](const std::vector<Tensor>& t) {
          auto [out, weights] = m(t[0], t[1], t[2], pad, need_weights, mask, false);
          return need_weights ? cat({out.flatten(), weights.flatten()}) : out;
        },
        {q, k, v, m->in_proj_weight, m->in_proj_bias, m->out_proj->weight, m->out_proj->bias});
  }
}

TEST_CASE("dropout acts in training only: p = 1 leaves out_proj's bias; eval() is the model without dropout") {
  nn::MultiheadAttention m(nn::MultiheadAttentionOptions(8, 2).dropout(1.0));
  load_case(*m, "mha_self");
  const Tensor x = fx("mha_self.in.x");
  const Tensor bias = m->out_proj->bias.detach().expand({4, 3, 8});
  for (bool need_weights : {true, false}) {
    INFO("need_weights ", need_weights);
    check_close(std::get<0>(m(x, x, x, Tensor(), need_weights)), bias, "every weight dropped", 1e-12);
  }
  m->eval();
  check_close(std::get<0>(m(x, x, x, fx("mha_self.mask.key_padding_mask"), true, fx("mha_self.mask.attn_mask"))),
              fx("mha_self.out.out"), "eval");

  // A stack of dropout-0.3 layers in eval() gives PyTorch's dropout-0 outputs.
  nn::TransformerEncoder enc(
      nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.3)), 2,
      nn::LayerNorm(nn::LayerNormOptions(8)));
  load_case(*enc, "encoder");
  const Tensor src = fx("encoder.in.src"), mask = fx("encoder.mask.mask");
  const Tensor pad = fx("encoder.mask.src_key_padding_mask");
  manual_seed(0);
  const Tensor trained = enc(src, mask, pad);
  CHECK(!allclose(trained, fx("encoder.out.out")));
  enc->eval();
  check_close(enc(src, mask, pad), fx("encoder.out.out"), "encoder in eval()");
}

TEST_CASE("MultiheadAttention starts as PyTorch's: its parameter order, xavier-uniform projections, zero biases") {
  nn::MultiheadAttention m(nn::MultiheadAttentionOptions(64, 4).add_bias_kv(true));
  std::vector<std::string> names;
  for (auto& [k, _] : m->named_parameters()) names.push_back(k);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj.weight",
                                          "out_proj.bias"});
  // xavier_uniform_ on [192, 64]: U(-b, b), b = sqrt(6 / (64 + 192)); out_proj.weight keeps Linear's
  // U(-1/8, 1/8). Over 12288 and 4096 draws the largest magnitude comes within 1% of the bound.
  const double b = std::sqrt(6.0 / 256);
  const double w_max = max(abs(m->in_proj_weight)).item<double>(), o_max = max(abs(m->out_proj->weight)).item<double>();
  CHECK(w_max <= b);
  CHECK(w_max > 0.99 * b);
  CHECK(o_max <= 0.125);
  CHECK(o_max > 0.99 * 0.125);
  CHECK(max(abs(m->in_proj_bias)).item<double>() == 0);
  CHECK(max(abs(m->out_proj->bias)).item<double>() == 0);
  CHECK(max(abs(m->bias_k)).item<double>() > 0);  // xavier_normal_
}

TEST_CASE("the stacks copy their layer: equal values, their own parameters, PyTorch's names") {
  nn::TransformerEncoderLayer proto(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
  proto->to(kFloat64);
  nn::TransformerEncoder enc(proto, 3);
  CHECK(enc->layers->size() == 3);
  CHECK(enc->norm.is_empty());
  auto state = enc->state_dict();
  CHECK(state.size() == 3 * proto->state_dict().size());
  CHECK(state[0].first == "layers.0.self_attn.in_proj_weight");
  CHECK(state.back().first == "layers.2.norm2.bias");
  auto* l2 = enc->layers->at<nn::TransformerEncoderLayer>(2);
  CHECK(l2->linear1->weight.dtype() == kFloat64);
  CHECK(allclose(l2->linear1->weight, proto->linear1->weight, 0, 0));
  CHECK(!l2->linear1->weight.is_same(proto->linear1->weight));
  {
    NoGradGuard no_grad;
    l2->linear1->weight.add_(1.0);
  }
  CHECK(allclose(enc->layers->at<nn::TransformerEncoderLayer>(1)->linear1->weight, proto->linear1->weight, 0, 0));

  nn::TransformerDecoder dec(nn::TransformerDecoderLayer(8, 2), 2, nn::LayerNorm(nn::LayerNormOptions(8)));
  std::vector<std::string> names;
  for (auto& [k, _] : dec->named_parameters()) names.push_back(k);
  CHECK(names.front() == "layers.0.self_attn.in_proj_weight");
  CHECK(names[4] == "layers.0.multihead_attn.in_proj_weight");
  CHECK(names.back() == "norm.bias");
  CHECK(names.size() == 2 * 18 + 2);

  // An encoder layer runs in a Sequential (its one-tensor forward), and an activation may be a function.
  nn::TransformerEncoderLayer relu_fn(
      nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).activation(
          [](const Tensor& x) { return relu(x); }));
  relu_fn->load_state_dict(nn::TransformerEncoderLayer(
      nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16))->state_dict());
  nn::TransformerEncoderLayer relu_str(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0));
  relu_str->load_state_dict(relu_fn->state_dict());
  nn::Sequential seq(relu_str);
  const Tensor x = randn({5, 2, 8});
  CHECK(allclose(seq->forward(x), relu_fn(x), 0, 0));
}

TEST_CASE("bad input names the module, the operands and their shapes, dtypes or values") {
  CHECK(contains(error_of([] { nn::MultiheadAttention(10, 3); }), "embed_dim 10 must be divisible by num_heads 3"));
  CHECK(contains(error_of([] { nn::TransformerEncoderLayer(10, 3); }),
                 "TransformerEncoderLayer(d_model=10, nhead=3): d_model 10 must be divisible by nhead 3"));
  CHECK(contains(error_of([] { nn::TransformerDecoderLayer(nn::TransformerDecoderLayerOptions(8, 2).dropout(1.5)); }),
                 "dropout must be in [0, 1], got 1.5"));
  CHECK(contains(error_of([] {
                   nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(8, 2).activation("tanh"));
                 }),
                 "activation should be \"relu\" or \"gelu\" (or a function), not \"tanh\""));

  nn::MultiheadAttention m(8, 2);
  const Tensor q = randn({4, 3, 8}), kv = randn({5, 3, 8});
  std::string e = error_of([&] { m(q, randn({5, 2, 8}), randn({5, 2, 8})); });
  CHECK(contains(e, "MultiheadAttention(embed_dim=8, num_heads=2): query [4, 3, 8], key [5, 2, 8] and value [5, 2, 8] "
                    "do not fit"));
  CHECK(contains(error_of([&] { m(q, randn({5, 3, 6}), kv); }), "key [5, 3, 6]"));
  CHECK(contains(error_of([&] { m(q, randn({5, 8}), kv); }), "got [4, 3, 8], [5, 8], [5, 3, 8]"));
  e = error_of([&] { m(q, kv, kv, Tensor(), true, zeros({3, 5})); });
  CHECK(contains(e, "attn_mask [3, 5] does not fit query [4, 3, 8] and key [5, 3, 8]: expected [L, S] = [4, 5] or "
                    "[N * num_heads, L, S] = [6, 4, 5]"));
  CHECK(contains(error_of([&] { m(q, kv, kv, zeros({2, 5}, kBool)); }),
                 "key_padding_mask [2, 5] does not fit key [5, 3, 8]: expected [N, S] = [3, 5]"));
  CHECK(contains(error_of([&] { m(q, kv, kv, zeros({3, 5}, kInt64)); }), "key_padding_mask must be bool or floating"));
  CHECK(contains(error_of([&] { m(q.to(kFloat64), kv.to(kFloat64), kv.to(kFloat64)); }),
                 "query, key and value must be float32 as the module's parameters, got float64"));

  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
  CHECK(contains(error_of([&] { layer(randn({5, 2, 6})); }),
                 "TransformerEncoderLayer(d_model=8, nhead=2): expected src [S, N, 8]"));
  CHECK(contains(error_of([&] { layer(randn({5, 2, 8}), zeros({4, 4})); }), "attn_mask [4, 4] does not fit"));
  nn::TransformerDecoderLayer dl(nn::TransformerDecoderLayerOptions(8, 2).dim_feedforward(16));
  CHECK(contains(error_of([&] { dl(randn({4, 2, 8}), randn({5, 2, 7})); }), "expected memory [S, N, 8]"));
  CHECK(contains(error_of([] { nn::TransformerEncoder(nn::TransformerEncoderLayer(nullptr), 2); }),
                 "TransformerEncoder: the layer to copy is an empty holder"));
}
