// F::scaled_dot_product_attention's fused kernels (tensor/attention.h): values and the gradients of q, k
// and v against PyTorch's (tests/fixtures/attention_fixtures.safetensors, written by
// tools/fixtures/make_attention_fixtures.py) and against the composed path (causal, bool and additive
// masks, scale, dropout with one Philox mask, GQA, L != S, the strided q, k, v views of a GPT), float64
// gradchecks, rows that attend nowhere, and errors naming the operands.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "nn/api.h"
#include "tensor/safetensors.h"
#include "tests/util/attention_runs.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

namespace {

using namespace lockstep;
using testing::expect_error;
namespace F = nn::functional;

using testing::attention::Case;
using testing::attention::Run;
using testing::attention::Sdpa;
using testing::attention::run;

std::string mismatch(const Tensor& got, const Tensor& want, double rtol, double atol) {
  return testing::attention::mismatch(got, want, testing::attention::within(rtol, atol));
}
void check_same(const Run& got, const Run& want, double rtol, double atol, const std::string& what) {
  testing::attention::check_run(got, want, testing::attention::within(rtol, atol), what);
}

std::map<std::string, Tensor> fixture(const std::string& name) {
  static const auto all = load_safetensors("tests/fixtures/attention_fixtures.safetensors").tensors;
  return testing::attention::case_tensors(all, name);
}

// The fused and the composed path on one case's operands (in `dtype`).
Sdpa fused_for(const Case& c, const Tensor& mask) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v) {
    return F::scaled_dot_product_attention(q, k, v, mask, 0.0, c.is_causal, c.scale, c.enable_gqa);
  };
}
Sdpa math_for(const Case& c, const Tensor& mask) {
  return [=](const Tensor& q, const Tensor& k, const Tensor& v) {
    return nn::detail::scaled_dot_product_attention_math(q, k, v, mask, 0.0, c.is_causal, c.scale, c.enable_gqa);
  };
}

Tensor case_mask(const Case& c, std::map<std::string, Tensor>& f, Dtype dtype) {
  if (!f.count("mask")) return Tensor();
  return c.bool_mask ? f.at("mask") != 0.0 : f.at("mask").to(dtype);
}

// q [B, H, T, D], k, v as examples/gpt makes them: views into one [B, T, 3 H D] projection, heads
// transposed, no copies.
std::array<Tensor, 3> gpt_views(int64_t B, int64_t H, int64_t T, int64_t D, Dtype dtype) {
  Tensor qkv = randn({B, T, 3 * H * D}, dtype);
  std::vector<Tensor> parts = qkv.split(H * D, 2);
  std::array<Tensor, 3> out;
  for (int i = 0; i < 3; ++i) out[i] = parts[i].view({B, T, H, D}).transpose(1, 2);
  return out;
}

}  // namespace

TEST_CASE("fused attention equals PyTorch's: values and the gradients of q, k, v, float64 and float32") {
  for (const Case& c : testing::attention::kFixtureCases) {
    std::map<std::string, Tensor> f = fixture(c.name);
    REQUIRE_MESSAGE(f.count("out"), c.name, " is missing from the fixture");
    const Run want{f.at("out"), f.at("grad.q"), f.at("grad.k"), f.at("grad.v")};
    const Tensor m64 = case_mask(c, f, kFloat64), m32 = case_mask(c, f, kFloat32);
    check_same(run(fused_for(c, m64), f.at("q").clone(), f.at("k").clone(), f.at("v").clone(), f.at("g")), want,
               1e-9, 1e-11, std::string(c.name) + " float64");
    check_same(run(fused_for(c, m32), f.at("q").to(kFloat32), f.at("k").to(kFloat32), f.at("v").to(kFloat32),
                   f.at("g").to(kFloat32)),
               want, 1e-4, 2e-5, std::string(c.name) + " float32");
    // The composed reference agrees with PyTorch as well.
    check_same(run(math_for(c, m64), f.at("q").clone(), f.at("k").clone(), f.at("v").clone(), f.at("g")), want,
               1e-9, 1e-11, std::string(c.name) + " composed");
  }
}

TEST_CASE("fused attention on a GPT's strided q, k, v views equals the composed path, without copying them") {
  manual_seed(1);
  for (int64_t T : {64, 100, 256}) {
    auto [q, k, v] = gpt_views(2, 4, T, 32, kFloat32);
    CHECK(!q.is_contiguous());
    const Tensor g = randn({2, 4, T, 32});
    const Case c{.name = "gpt", .is_causal = true};
    const Run fused = run(fused_for(c, Tensor()), q, k, v, g), math = run(math_for(c, Tensor()), q, k, v, g);
    check_same(fused, math, 1e-4, 1e-5, "T = " + std::to_string(T));
    // The output is stored heads-inner: joining the heads is a view.
    Tensor y = F::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
    CHECK(y.transpose(1, 2).is_contiguous());
  }
}

TEST_CASE("fused attention: masks broadcast from [L, S], [B, 1, L, S] and [H, 1, S]; 3-D operands; L != S") {
  manual_seed(2);
  const int64_t B = 2, H = 3, L = 70, S = 45, E = 8, Ev = 16;
  Tensor q = randn({B, H, L, E}, kFloat64), k = randn({B, H, S, E}, kFloat64), v = randn({B, H, S, Ev}, kFloat64);
  const Tensor g = randn({B, H, L, Ev}, kFloat64);
  Tensor bool_ls = rand({L, S}, kFloat64) > 0.3;
  Tensor add_b1ls = randn({B, 1, L, S}, kFloat64), add_h1s = randn({H, 1, S}, kFloat64);
  for (const Tensor& m : {bool_ls, add_b1ls, add_h1s}) {
    const Case c{.name = "mask"};
    check_same(run(fused_for(c, m), q, k, v, g), run(math_for(c, m), q, k, v, g), 1e-10, 1e-12,
               "mask " + shape_str(m.shape()));
  }
  const Case causal{.name = "causal 3-D", .is_causal = true, .scale = 0.7};
  Tensor q3 = randn({B, L, E}, kFloat64), k3 = randn({B, S, E}, kFloat64), v3 = randn({B, S, Ev}, kFloat64);
  check_same(run(fused_for(causal, Tensor()), q3, k3, v3, randn({B, L, Ev}, kFloat64)),
             run(math_for(causal, Tensor()), q3, k3, v3, randn({B, L, Ev}, kFloat64)), 1e-10, 1e-12, "3-D");
}

TEST_CASE("fused attention with dropout equals the composed path under the same Philox mask") {
  const int64_t B = 2, Hq = 4, Hkv = 2, L = 80, S = 72, E = 16;
  manual_seed(3);
  Tensor q = randn({B, Hq, L, E}, kFloat64), k = randn({B, Hkv, S, E}, kFloat64), v = randn({B, Hkv, S, E}, kFloat64);
  const Tensor g = randn({B, Hq, L, E}, kFloat64);
  for (bool causal : {false, true}) {
    auto fused = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return F::scaled_dot_product_attention(a, b, c, Tensor(), 0.3, causal, std::nullopt, true);
    };
    auto math = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return nn::detail::scaled_dot_product_attention_math(a, b, c, Tensor(), 0.3, causal, std::nullopt, true);
    };
    manual_seed(11);
    const Run a = run(fused, q, k, v, g);
    manual_seed(11);
    const Run b = run(math, q, k, v, g);
    check_same(a, b, 1e-10, 1e-12, causal ? "dropout, causal" : "dropout");
    // About 30% of the weights dropped: the output differs from no dropout's.
    const Run none = run([&](const Tensor& x, const Tensor& y, const Tensor& z) {
      return F::scaled_dot_product_attention(x, y, z, Tensor(), 0.0, causal, std::nullopt, true);
    }, q, k, v, g);
    CHECK(!mismatch(a.out, none.out, 1e-3, 1e-3).empty());
    // The next draw takes a new mask.
    const Run again = run(fused, q, k, v, g);
    CHECK(!mismatch(a.out, again.out, 1e-3, 1e-3).empty());
  }
}

TEST_CASE("fused attention: float64 gradcheck (causal across tiles, additive mask, GQA, dropout)") {
  manual_seed(4);
  testing::gradcheck([](const std::vector<Tensor>& in) {
    return F::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.0, true);
  }, {randn({1, 1, 67, 4}, kFloat64), randn({1, 1, 67, 4}, kFloat64), randn({1, 1, 67, 3}, kFloat64)});
  const Tensor mask = randn({3, 5}, kFloat64);
  testing::gradcheck([&](const std::vector<Tensor>& in) {
    return F::scaled_dot_product_attention(in[0], in[1], in[2], mask, 0.0, false, 0.5);
  }, {randn({2, 1, 3, 4}, kFloat64), randn({2, 1, 5, 4}, kFloat64), randn({2, 1, 5, 2}, kFloat64)});
  testing::gradcheck([](const std::vector<Tensor>& in) {
    return F::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.0, false, std::nullopt, true);
  }, {randn({1, 4, 3, 4}, kFloat64), randn({1, 2, 5, 4}, kFloat64), randn({1, 2, 5, 4}, kFloat64)});
  testing::gradcheck([](const std::vector<Tensor>& in) {
    manual_seed(9);  // the same mask at every evaluation
    return F::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.4);
  }, {randn({1, 2, 5, 4}, kFloat64), randn({1, 2, 6, 4}, kFloat64), randn({1, 2, 6, 4}, kFloat64)});
}

TEST_CASE("a row that may attend nowhere gives 0 and no gradient, not NaN") {
  Tensor q = randn({1, 1, 3, 4}, kFloat64), k = randn({1, 1, 5, 4}, kFloat64), v = randn({1, 1, 5, 4}, kFloat64);
  // Row 1 may attend nowhere.
  const Tensor mask = tensor(std::vector<double>{1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}, {3, 5}) != 0.0;
  const Run r = run(fused_for(Case{.name = "empty row"}, mask), q, k, v, ones({1, 1, 3, 4}, kFloat64));
  CHECK(r.out.index({0, 0, 1}).abs().sum().item<double>() == 0.0);
  CHECK(r.dq.index({0, 0, 1}).abs().sum().item<double>() == 0.0);
  CHECK(r.out.index({0, 0, 0}).abs().sum().item<double>() > 0.0);
  CHECK(std::isfinite(r.dk.sum().item<double>()));
}

TEST_CASE("scaled_dot_product_attention rejects bad operands, naming them") {
  Tensor q = randn({2, 4, 5, 8}), k = randn({2, 2, 6, 8}), v = randn({2, 2, 6, 8});
  expect_error("E mismatch", [&] { F::scaled_dot_product_attention(q, randn({2, 4, 6, 7}), randn({2, 4, 6, 8})); },
               {"scaled_dot_product_attention", "[2, 4, 5, 8]", "[2, 4, 6, 7]"});
  expect_error("S mismatch", [&] { F::scaled_dot_product_attention(q, randn({2, 4, 6, 8}), randn({2, 4, 7, 8})); },
               {"scaled_dot_product_attention", "[2, 4, 6, 8]", "[2, 4, 7, 8]"});
  expect_error("heads that do not divide", [&] {
    F::scaled_dot_product_attention(q, randn({2, 3, 6, 8}), randn({2, 3, 6, 8}), Tensor(), 0.0, false, std::nullopt,
                                    true);
  }, {"scaled_dot_product_attention", "enable_gqa", "[2, 4, 5, 8]", "[2, 3, 6, 8]"});
  expect_error("a mask that does not broadcast", [&] {
    F::scaled_dot_product_attention(q, k, v, ones({5, 5}, TensorOptions(kBool)), 0.0, false, std::nullopt, true);
  }, {"attn_mask", "[5, 5]", "[2, 4, 5, 6]"});
  expect_error("dtype", [&] { F::scaled_dot_product_attention(q, k.to(kFloat64), v, Tensor(), 0, false, {}, true); },
               {"scaled_dot_product_attention", "float32", "float64"});
  expect_error("mask dtype", [&] { F::scaled_dot_product_attention(q, q, q, zeros({5, 5}, kFloat64)); },
               {"attn_mask", "float64"});
  expect_error("mask and is_causal", [&] { F::scaled_dot_product_attention(q, q, q, zeros({5, 5}), 0.0, true); },
               {"attn_mask", "is_causal"});
  expect_error("dropout_p", [&] { F::scaled_dot_product_attention(q, q, q, Tensor(), 1.5); }, {"dropout_p", "1.5"});
}
