// F::multi_head_attention_forward against PyTorch (tests/fixtures/layer_fixtures.safetensors, "mha.*" keys,
// written by tools/fixtures/make_layer_fixtures.py): sequence-first inputs, packed and separate projection
// weights, bias_k / bias_v, add_zero_attn, static_k / static_v, float and bool masks, key padding, weights
// averaged or per head, and need_weights=false; outputs, weights and the gradients of every input to
// 1e-10 in float64. Then MultiheadAttention's forward equals the function over its parameters. Part of the
// nn_layers_test binary.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/test_util.h"

using namespace lockstep;
namespace F = lockstep::nn::functional;

namespace {

const testing::Fixtures fx("tests/fixtures/layer_fixtures.safetensors", "make_layer_fixtures.py");

const char* const kLeaves[] = {"query",         "key",           "value",         "in_proj_weight", "in_proj_bias",
                               "q_proj_weight", "k_proj_weight", "v_proj_weight", "bias_k",         "bias_v",
                               "static_k",      "static_v",      "out_proj_weight", "out_proj_bias"};

}  // namespace

TEST_CASE("multi_head_attention_forward matches PyTorch: projections, extra keys, masks, weights, gradients") {
  int cases = 0;
  for (const std::string& c : fx.cases("mha.")) {
    INFO(c);
    ++cases;
    const auto opts = fx(c + ".opts").to_vector<int64_t>();  // E, H, zero_attn, separate, need_weights, average, self
    const bool self_attn = opts[6] != 0;
    std::map<std::string, Tensor> t;
    for (const char* name : kLeaves) {
      const std::string key = c + "." + name;
      if (fx.contains(key) && !(self_attn && (std::string(name) == "key" || std::string(name) == "value")))
        t[name] = fx(key).set_requires_grad();
    }
    if (self_attn) t["key"] = t["value"] = t["query"];
    auto get = [&](const char* name) { return t.count(name) ? t[name] : Tensor(); };
    auto o = F::MultiheadAttentionForwardFuncOptions(opts[0], opts[1], get("in_proj_weight"), get("in_proj_bias"),
                                                     get("bias_k"), get("bias_v"), opts[2] != 0, 0.0,
                                                     get("out_proj_weight"), get("out_proj_bias"))
                 .training(false)
                 .need_weights(opts[4] != 0)
                 .average_attn_weights(opts[5] != 0)
                 .use_separate_proj_weight(opts[3] != 0)
                 .q_proj_weight(get("q_proj_weight"))
                 .k_proj_weight(get("k_proj_weight"))
                 .v_proj_weight(get("v_proj_weight"))
                 .static_k(get("static_k"))
                 .static_v(get("static_v"));
    if (fx.contains(c + ".attn_mask")) o.attn_mask(fx(c + ".attn_mask"));
    if (fx.contains(c + ".key_padding_mask")) o.key_padding_mask(fx(c + ".key_padding_mask"));
    auto [out, weights] = F::multi_head_attention_forward(t["query"], t["key"], t["value"], o);
    testing::check_close(out, fx(c + ".out"), c + ".out", 1e-10);
    CHECK(weights.defined() == fx.contains(c + ".weights"));
    if (weights.defined()) testing::check_close(weights, fx(c + ".weights"), c + ".weights", 1e-10);
    sum(out * fx(c + ".gout")).backward();
    for (auto& [name, leaf] : t) {
      if (self_attn && (name == "key" || name == "value")) continue;
      const Tensor g = leaf.grad().defined() ? leaf.grad() : zeros_like(leaf);
      testing::check_close(g, fx(c + ".grad." + name), c + ".grad." + name, 1e-10);
    }
  }
  CHECK(cases == 7);
}

TEST_CASE("MultiheadAttention's forward is multi_head_attention_forward over its parameters") {
  manual_seed(3);
  nn::MultiheadAttention m(nn::MultiheadAttentionOptions(8, 2).add_bias_kv(true));
  m->eval();
  Tensor q = randn({4, 2, 8}), kv = randn({5, 2, 8});
  auto [a, wa] = m(q, kv, kv);
  auto [b, wb] = F::multi_head_attention_forward(
      q, kv, kv,
      F::MultiheadAttentionForwardFuncOptions(8, 2, m->in_proj_weight, m->in_proj_bias, m->bias_k, m->bias_v, false,
                                              0.0, m->out_proj->weight, m->out_proj->bias)
          .training(false));
  CHECK(internal::allclose(a, b, 0, 1e-6));
  CHECK(internal::allclose(wa, wb, 0, 1e-6));
  CHECK(testing::error_of([&] {
          F::multi_head_attention_forward(q, kv, kv, F::MultiheadAttentionForwardFuncOptions(
                                                         8, 3, m->in_proj_weight, {}, {}, {}, false, 0.0,
                                                         m->out_proj->weight, {}));
        }).find("multi_head_attention_forward: embed_dim 8 must be divisible by num_heads 3") != std::string::npos);
}
