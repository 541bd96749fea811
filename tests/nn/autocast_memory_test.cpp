// What autograd keeps for backward, in bytes and dtypes, counted by tensor/memory_stats.h (this test
// runs with LOCKSTEP_MEMORY_STATS=1): the accounting itself; under autocast, a Linear keeps the
// bfloat16 casts of its input and weight and no float32 copy; backward frees each node's saved tensors
// as soon as the node has run; gelu_linear (autograd/gelu_linear.h) gives linear(gelu(x))'s values and
// gradients while keeping x alone.
#include <doctest/doctest.h>

#include "autograd/engine.h"
#include "autograd/gelu_linear.h"
#include "examples/gpt/model.h"
#include "nn/api.h"
#include "tensor/memory_stats.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
namespace ms = lockstep::memory_stats;
namespace F = lockstep::nn::functional;

namespace {
size_t live(const char* label, Dtype dtype) { return ms::snapshot().bytes(label, dtype); }
}  // namespace

TEST_CASE("memory_stats counts each storage under its dtype and the op or scope that made it") {
  REQUIRE(ms::enabled());
  const size_t f32 = live(nullptr, kFloat32), bf16 = live(nullptr, kBFloat16);
  Tensor a = ones({100, 10});
  CHECK(live(nullptr, kFloat32) - f32 == 4000);
  Tensor x = ones({10}).requires_grad_();
  Tensor e = x.exp();  // a recorded op's output carries its name
  CHECK(live("exp", kFloat32) == 40);
  {
    ms::Scope scope("mine");
    Tensor b = zeros({5}, kBFloat16);
    CHECK(live("mine", kBFloat16) == 10);
    CHECK(live(nullptr, kBFloat16) - bf16 == 10);
  }
  CHECK(live("mine", kBFloat16) == 0);  // freed with b
  ms::reset_peak();
  const size_t now = ms::snapshot().live;
  { Tensor big = zeros({1000}, kFloat64); }
  const ms::Snapshot s = ms::snapshot();
  CHECK(s.live == now);
  CHECK(s.peak == now + 8000);
  CHECK(s.bytes("other", kFloat64, /*at_the_peak=*/true) >= 8000);
  CHECK(ms::report().find("memory_stats: peak live") != std::string::npos);
}

TEST_CASE("under autocast a Linear keeps the bfloat16 casts of its input and weight, and no float32 copy") {
  manual_seed(0);
  nn::Linear lin(64, 32);
  Tensor x = randn({16, 64});
  const size_t f32 = live(nullptr, kFloat32), bf16 = live(nullptr, kBFloat16);
  Tensor y;
  {
    autocast guard(kCPU);
    y = lin(x);
  }
  CHECK(live(nullptr, kFloat32) == f32);
  // x's cast [16, 64] and the weight's [32, 64], kept for backward; y [16, 32]. The bias's cast went
  // with the region's cast cache.
  CHECK(live(nullptr, kBFloat16) - bf16 == (16 * 64 + 32 * 64 + 16 * 32) * 2);
  y.to(kFloat32).sum().backward();
  CHECK(live(nullptr, kBFloat16) - bf16 == 16 * 32 * 2);                // y alone
  CHECK(live(nullptr, kFloat32) - f32 == (32 * 64 + 32) * 4);           // the float32 gradients
}

TEST_CASE("backward frees a node's saved tensors as soon as the node has run") {
  manual_seed(0);
  nn::Linear l1(64, 48), l2(48, 32);
  Tensor x = randn({16, 64});
  Tensor y;
  {
    autocast guard(kCPU);
    y = l2(l1(x));
  }
  CHECK(live("linear", kBFloat16) == (16 * 48 + 16 * 32) * 2);  // l1's output (saved by l2) and y
  size_t when_l1_done = 0;
  autograd::register_post_accumulate_grad_hook(l1->weight, [&](Tensor&) { when_l1_done = live("linear", kBFloat16); });
  y.to(kFloat32).sum().backward();
  // l2 ran before l1's weight gradient arrived, and let go of l1's output then: y is what is left.
  CHECK(when_l1_done == 16 * 32 * 2);
}

TEST_CASE("gelu_linear: float64 gradients against finite differences, with and without a bias, both GELUs") {
  using V = const std::vector<Tensor>&;
  manual_seed(3);
  for (const char* approximate : {"none", "tanh"}) {
    testing::gradcheck([&](V t) { return gelu_linear(t[0], t[1], t[2], approximate); },
                       {randn({2, 3, 5}, kFloat64), randn({4, 5}, kFloat64), randn({4}, kFloat64)});
    testing::gradcheck([&](V t) { return gelu_linear(t[0], t[1], Tensor(), approximate); },
                       {randn({3, 5}, kFloat64), randn({2, 5}, kFloat64)});
  }
}

// The fused op against gelu then linear: the same values and gradients, bit for bit (the same kernels
// in the same order), in float32 and under autocast; and under autocast it keeps x, not gelu(x).
TEST_CASE("gelu_linear equals linear(gelu(x)) and keeps the GELU's input only") {
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    manual_seed(4);
    nn::Linear fc(16, 64), proj(64, 16);
    Tensor x = randn({8, 16});
    auto run = [&](bool fused) {
      for (auto* p : {&fc->weight, &fc->bias, &proj->weight, &proj->bias}) p->set_grad(Tensor());
      Tensor y;
      size_t kept_bf16 = 0;
      {
        autocast guard(kCPU, kBFloat16, bf16);
        const size_t before = live(nullptr, kBFloat16);
        Tensor h = fc(x);
        y = fused ? gelu_linear(h, proj->weight, proj->bias) : proj(F::gelu(h));
        kept_bf16 = live(nullptr, kBFloat16) - before;
      }
      y.to(kFloat32).pow(2).sum().backward();
      return std::make_tuple(y.to(kFloat32).to_vector<float>(), fc->weight.grad().to_vector<float>(),
                             proj->weight.grad().to_vector<float>(), proj->bias.grad().to_vector<float>(), kept_bf16);
    };
    auto [y0, gfc0, gw0, gb0, kept0] = run(false);
    auto [y1, gfc1, gw1, gb1, kept1] = run(true);
    CHECK(y0 == y1);
    CHECK(gfc0 == gfc1);
    CHECK(gw0 == gw1);
    CHECK(gb0 == gb1);
    // Under autocast gelu(h) [8, 64] in bfloat16 is no longer kept (nor is anything in float32 either way).
    if (bf16) CHECK(kept0 - kept1 == 8 * 64 * 2);
  }
}

TEST_CASE("gelu_linear rejects operands that do not fit, naming itself") {
  CHECK(testing::error_of([] { gelu_linear(ones({2, 3}), ones({4, 5})); }).find("gelu_linear: input [2, 3]") == 0);
  CHECK(testing::error_of([] { gelu_linear(ones({2, 5}), ones({4, 5}), Tensor(), "fast"); }).find("gelu_linear: approximate") == 0);
}

// nanoGPT's block under autocast keeps, besides its float32 input: the residual h and the output in float32,
// the LayerNorms' statistics, the bfloat16 casts of both LayerNorm outputs and of the four weights, the
// attention's q, k, v (one [B, T, 3C] product), its output and float32 logsumexp, and c_fc's output
// (the GELU's input). No GELU output, no float32 copy of a product's input.
TEST_CASE("a GPT block under autocast keeps what PyTorch's autocast keeps, less the GELU's output") {
  const int64_t B = 2, T = 8, C = 32, H = 4;
  manual_seed(5);
  examples::Block block(examples::GPTConfig{.block_size = T, .vocab_size = 10, .n_layer = 1, .n_head = H, .n_embd = C});
  Tensor x = randn({B, T, C});
  const size_t f32 = live(nullptr, kFloat32), bf16 = live(nullptr, kBFloat16);
  Tensor y;
  {
    autocast guard(kCPU);
    y = block(x);
  }
  const int64_t rows = B * T;
  CHECK(live(nullptr, kFloat32) - f32 == (2 * rows * C + 2 * 2 * rows + B * H * T) * 4);
  CHECK(live(nullptr, kBFloat16) - bf16 ==
        (2 * rows * C + rows * 3 * C + rows * C + rows * 4 * C + (3 * C * C + C * C + 4 * C * C + C * 4 * C)) * 2);
}
