// F::scaled_dot_product_attention's fused kernels on bfloat16 and float16 q, k, v (read and written as
// such, computed in float32): values and the gradients of q, k, v against the float32 fused kernel on
// the same (rounded) operands, for causal, bool and additive masks, scale, dropout, GQA, L != S, 3-D and
// strided views and odd head sizes; and against PyTorch's bfloat16 results
// (tests/fixtures/attention_bf16_fixtures.safetensors, written by
// tools/fixtures/make_attention_bf16_fixtures.py). attention_half_f32_test runs the same with
// LOCKSTEP_CPU_ISA=avx512: bfloat16 then takes the float32-register kernel, not vdpbf16ps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "nn/api.h"
#include "tensor/safetensors.h"
#include "tests/util/attention_runs.h"
#include "tests/util/test_util.h"

namespace {

using namespace lockstep;
namespace F = nn::functional;

using testing::attention::Run;
using testing::attention::run;

void check_close(const Run& got, const Run& want, double tol, const std::string& what) {
  testing::attention::check_run(got, want, testing::attention::relative_to_max(tol), what);
}

// Per dtype: the tolerance against float32 on the same operands (bfloat16: P and dS are rounded to
// 8 bits for the products, and each result once; float16: each result rounded once, to 11 bits).
double tolerance(Dtype d) { return d == kBFloat16 ? 2e-2 : 2e-3; }

// The 16-bit run and the float32 fused run on the same values: q, k, v, g rounded to `dtype` first.
void compare_with_float32(Dtype dtype, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          double dropout_p, bool is_causal, std::optional<double> scale, bool gqa,
                          const std::string& what) {
  Tensor out_shape = nn::detail::scaled_dot_product_attention_math(q.detach(), k.detach(), v.detach(), mask,
                                                                   0.0, is_causal, scale, gqa);
  const Tensor g = randn(out_shape.shape());
  auto lowered = [&](const Tensor& t) { return t.to(dtype); };
  auto sdpa = [&](const Tensor& m) {
    return [=](const Tensor& a, const Tensor& b, const Tensor& c) {
      return F::scaled_dot_product_attention(a, b, c, m, dropout_p, is_causal, scale, gqa);
    };
  };
  const Tensor mask16 = mask.defined() && mask.dtype() != kBool ? mask.to(dtype) : mask;
  const Tensor mask32 = mask.defined() && mask.dtype() != kBool ? mask16.to(kFloat32) : mask;
  manual_seed(77);
  const Run half = run(sdpa(mask16), lowered(q), lowered(k), lowered(v), lowered(g));
  manual_seed(77);
  const Run ref = run(sdpa(mask32), lowered(q).to(kFloat32), lowered(k).to(kFloat32), lowered(v).to(kFloat32),
                      lowered(g).to(kFloat32));
  for (const Tensor* t : {&half.out, &half.dq, &half.dk, &half.dv})
    CHECK_MESSAGE(t->dtype() == dtype, what, ": a result is ", t->dtype());
  check_close(half, ref, tolerance(dtype), what + " " + dtype_name(dtype));
}

std::map<std::string, Tensor> fixture(const std::string& name) {
  static const auto all = load_safetensors("tests/fixtures/attention_bf16_fixtures.safetensors").tensors;
  return testing::attention::case_tensors(all, name);
}

}  // namespace

TEST_CASE("16-bit fused attention equals the float32 kernel on the same operands: causal, masks, scale, GQA") {
  manual_seed(1);
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    {  // causal across tiles, GPT heads
      Tensor q = randn({2, 3, 150, 32}), k = randn({2, 3, 150, 32}), v = randn({2, 3, 150, 32});
      compare_with_float32(dtype, q, k, v, Tensor(), 0.0, true, std::nullopt, false, "causal");
    }
    {  // L != S, bool mask [L, S], Ev != E
      Tensor q = randn({2, 2, 70, 16}), k = randn({2, 2, 45, 16}), v = randn({2, 2, 45, 24});
      compare_with_float32(dtype, q, k, v, rand({70, 45}) > 0.3, 0.0, false, std::nullopt, false, "bool mask");
    }
    {  // additive mask broadcast from [B, 1, L, S], scale
      Tensor q = randn({2, 2, 67, 8}), k = randn({2, 2, 130, 8}), v = randn({2, 2, 130, 8});
      compare_with_float32(dtype, q, k, v, randn({2, 1, 67, 130}), 0.0, false, 0.3, false, "additive mask, scale");
    }
    {  // GQA, causal with L < S (the top-left triangle)
      Tensor q = randn({1, 4, 40, 16}), k = randn({1, 2, 90, 16}), v = randn({1, 2, 90, 16});
      compare_with_float32(dtype, q, k, v, Tensor(), 0.0, true, std::nullopt, true, "gqa");
    }
    {  // 3-D operands, odd head sizes (vdpbf16ps reads pairs: these take the float32-register kernel)
      Tensor q = randn({3, 20, 5}), k = randn({3, 33, 5}), v = randn({3, 33, 7});
      compare_with_float32(dtype, q, k, v, Tensor(), 0.0, false, std::nullopt, false, "3-D, odd E");
    }
  }
}

TEST_CASE("16-bit fused attention: dropout's mask is the float32 kernel's; strided GPT views are read in place") {
  manual_seed(2);
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    Tensor q = randn({2, 4, 80, 16}), k = randn({2, 2, 72, 16}), v = randn({2, 2, 72, 16});
    compare_with_float32(dtype, q, k, v, Tensor(), 0.3, false, std::nullopt, true, "dropout, gqa");
    compare_with_float32(dtype, q, k, v, Tensor(), 0.3, true, std::nullopt, true, "dropout, causal");
    // q, k, v as views into one [B, T, 3 H D] projection, heads transposed.
    const int64_t B = 2, H = 4, T = 100, D = 32;
    const Tensor qkv = randn({B, T, 3 * H * D}).to(dtype);
    auto views_of = [&](const Tensor& base) {
      std::vector<Tensor> parts = base.split(H * D, 2);
      std::array<Tensor, 3> views;
      for (int i = 0; i < 3; ++i) views[i] = parts[i].view({B, T, H, D}).transpose(1, 2);
      return views;
    };
    const auto views = views_of(qkv.detach()), ref_views = views_of(qkv.to(kFloat32).detach());
    CHECK(!views[0].is_contiguous());
    const Tensor g = randn({B, H, T, D}).to(dtype);
    auto causal = [](const Tensor& a, const Tensor& b, const Tensor& c) {
      return F::scaled_dot_product_attention(a, b, c, Tensor(), 0.0, true);
    };
    const Run half = run(causal, views[0], views[1], views[2], g);
    const Run ref = run(causal, ref_views[0], ref_views[1], ref_views[2], g.to(kFloat32));
    check_close(half, ref, tolerance(dtype), std::string("GPT views ") + dtype_name(dtype));
    CHECK(half.out.transpose(1, 2).is_contiguous());  // stored heads-inner, as float32's
  }
}

TEST_CASE("bfloat16 fused attention equals PyTorch's bfloat16 results: values and the gradients of q, k, v") {
  for (const testing::attention::Case& c : testing::attention::kFixtureCases) {
    std::map<std::string, Tensor> f = fixture(c.name);
    REQUIRE_MESSAGE(f.count("out"), c.name, " is missing from the fixture");
    REQUIRE(f.at("q").dtype() == kBFloat16);
    Tensor mask;
    if (f.count("mask")) mask = c.bool_mask ? f.at("mask") != 0.0 : f.at("mask");
    const Run got = run([&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return F::scaled_dot_product_attention(q, k, v, mask, 0.0, c.is_causal, c.scale, c.enable_gqa);
    }, f.at("q").clone(), f.at("k").clone(), f.at("v").clone(), f.at("g"));
    // Both round P, dS and every result to bfloat16, in different orders: a few bfloat16 steps apart.
    check_close(got, {f.at("out"), f.at("grad.q"), f.at("grad.k"), f.at("grad.v")}, 2e-2, c.name);
  }
}

TEST_CASE("16-bit fused attention: a row that may attend nowhere gives 0 and no gradient, not NaN") {
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    Tensor q = randn({1, 1, 3, 4}).to(dtype), k = randn({1, 1, 5, 4}).to(dtype), v = randn({1, 1, 5, 4}).to(dtype);
    const Tensor mask = tensor(std::vector<double>{1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}, {3, 5}) != 0.0;
    const Run r = run([&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return F::scaled_dot_product_attention(a, b, c, mask);
    }, q, k, v, ones({1, 1, 3, 4}).to(dtype));
    CHECK(r.out.index({0, 0, 1}).abs().sum().item<double>() == 0.0);
    CHECK(r.dq.index({0, 0, 1}).abs().sum().item<double>() == 0.0);
    CHECK(r.out.index({0, 0, 0}).abs().sum().item<double>() > 0.0);
    CHECK(std::isfinite(r.dk.to(kFloat32).sum().item<double>()));
  }
}
