// BatchNorm's fused kernels and autograd node (nn/batch_norm.cpp, tensor/batch_norm.*) against the
// formula composed from mean, var and elementwise ops, and PyTorch's documented semantics: running
// statistics (momentum, unbiased variance, momentum nullopt's cumulative average), eval(), affine false,
// track_running_stats false, BatchNorm1d on [N, C] and [N, C, L], BatchNorm2d; float64 gradcheck of
// input, weight and bias; errors that name the shapes. nn_layers_test checks PyTorch's own numbers.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "nn/api.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;
using lockstep::testing::gradcheck;
namespace F = lockstep::nn::functional;

namespace {

// [C] -> [1, C, 1, ...] against x.
Tensor per_channel(const Tensor& t, const Tensor& x) {
  Shape s(x.dim(), 1);
  s[1] = x.size(1);
  return t.reshape(s);
}

std::vector<int64_t> reduced_dims(const Tensor& x) {
  std::vector<int64_t> d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

// The composed formula: (x - mean) / sqrt(var + eps) * w + b with the batch's biased variance.
Tensor composed(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5) {
  std::vector<int64_t> dims = reduced_dims(x);
  Tensor y = (x - mean(x, dims, true)) / sqrt(var(x, dims, false, true) + eps);
  if (w.defined()) y = y * per_channel(w, x);
  if (b.defined()) y = y + per_channel(b, x);
  return y;
}

// Outputs and gradients (x, w, b) of the fused function and the composed formula agree, in float64.
void check_against_composed(const Shape& shape) {
  INFO("input ", shape);
  const int64_t c = shape[1];
  Tensor x = randn(shape, kFloat64) * 3 + 2, w = randn({c}, kFloat64), b = randn({c}, kFloat64);
  Tensor g = randn(shape, kFloat64);
  std::vector<Tensor> got, want;
  for (bool fused : {true, false}) {
    std::vector<Tensor> leaves{x.detach().set_requires_grad(), w.detach().set_requires_grad(),
                               b.detach().set_requires_grad()};
    Tensor y = fused ? F::batch_norm(leaves[0], Tensor(), Tensor(), leaves[1], leaves[2], true)
                     : composed(leaves[0], leaves[1], leaves[2]);
    y.backward(g);
    auto& out = fused ? got : want;
    out = {y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
  }
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("output/gradient ", i);
    CHECK(allclose(got[i], want[i], 1e-10, 1e-10));
  }
}

}  // namespace

TEST_CASE("batch_norm equals the composed formula on 1d and 2d inputs, outputs and gradients") {
  manual_seed(0);
  check_against_composed({8, 3});           // BatchNorm1d [N, C]
  check_against_composed({4, 3, 7});        // BatchNorm1d [N, C, L]
  check_against_composed({4, 5, 6, 7});     // BatchNorm2d, planes not a multiple of a vector
  check_against_composed({3, 2, 16, 16});   // whole vectors
  check_against_composed({2, 3, 2, 2, 3});  // [N, C, D, H, W]
}

TEST_CASE("batch_norm in float32 keeps float64's statistics: a large mean does not cancel the variance") {
  manual_seed(1);
  Tensor x64 = randn({16, 4, 12, 12}, kFloat64) * 0.5 + 1000;
  Tensor y32 = F::batch_norm(x64.to(kFloat32), Tensor(), Tensor(), Tensor(), Tensor(), true);
  CHECK(allclose(y32.to(kFloat64), composed(x64, Tensor(), Tensor()), 0, 2e-3));
  // bfloat16 computes in float32.
  Tensor yb = F::batch_norm(x64.to(kBFloat16), Tensor(), Tensor(), Tensor(), Tensor(), true);
  CHECK(yb.dtype() == kBFloat16);
}

TEST_CASE("BatchNorm's running statistics: momentum, unbiased variance, and momentum nullopt's average") {
  manual_seed(2);
  Tensor x1 = randn({6, 3, 4, 4}, kFloat64) + 1, x2 = randn({6, 3, 4, 4}, kFloat64) * 2 - 1;
  auto batch_mean = [](const Tensor& x) { return mean(x, {0, 2, 3}); };
  auto batch_uvar = [](const Tensor& x) { return var(x, {0, 2, 3}, true); };

  nn::BatchNorm2d bn(nn::BatchNormOptions(3).momentum(0.3));
  bn->to(kFloat64);
  bn(x1);
  bn(x2);
  Tensor rm = (batch_mean(x1) * 0.3) * 0.7 + batch_mean(x2) * 0.3;
  Tensor rv = (ones({3}, kFloat64) * 0.7 + batch_uvar(x1) * 0.3) * 0.7 + batch_uvar(x2) * 0.3;
  CHECK(allclose(bn->running_mean, rm, 1e-12, 1e-12));
  CHECK(allclose(bn->running_var, rv, 1e-12, 1e-12));
  CHECK(bn->num_batches_tracked.item<int64_t>() == 2);

  nn::BatchNorm2d avg(nn::BatchNormOptions(3).momentum(std::nullopt));
  avg->to(kFloat64);
  avg(x1);
  avg(x2);
  CHECK(allclose(avg->running_mean, (batch_mean(x1) + batch_mean(x2)) * 0.5, 1e-12, 1e-12));
  CHECK(allclose(avg->running_var, (batch_uvar(x1) + batch_uvar(x2)) * 0.5, 1e-12, 1e-12));

  // eval(): the running statistics normalize, and nothing is updated.
  bn->eval();
  Tensor before = bn->running_mean.clone();
  Tensor y = bn(x1);
  CHECK(allclose(y, (x1 - per_channel(rm, x1)) / sqrt(per_channel(rv, x1) + 1e-5), 1e-12, 1e-12));
  CHECK(bn->num_batches_tracked.item<int64_t>() == 2);
  CHECK(allclose(bn->running_mean, before, 0, 0));
}

TEST_CASE("BatchNorm with affine false, and with track_running_stats false (batch statistics in eval too)") {
  manual_seed(3);
  Tensor x = randn({5, 4, 3}, kFloat64);
  nn::BatchNorm1d plain(nn::BatchNormOptions(4).affine(false));
  plain->to(kFloat64);
  CHECK(!plain->weight.defined());
  CHECK(plain->parameters().empty());
  CHECK(allclose(plain(x), composed(x, Tensor(), Tensor()), 1e-12, 1e-12));

  nn::BatchNorm1d untracked(nn::BatchNormOptions(4).track_running_stats(false));
  untracked->to(kFloat64);
  CHECK(!untracked->running_mean.defined());
  untracked->eval();
  CHECK(allclose(untracked(x), composed(x, untracked->weight, untracked->bias), 1e-12, 1e-12));
  nn::BatchNorm1d flat(4);  // [N, C]
  flat->to(kFloat64);
  Tensor x2 = randn({7, 4}, kFloat64);
  CHECK(allclose(flat(x2), composed(x2, Tensor(), Tensor()), 1e-12, 1e-12));
}

TEST_CASE("batch_norm's gradients in float64 match finite differences: training and eval, every form") {
  manual_seed(4);
  auto r = [](Shape s) { return randn(s, kFloat64); };
  gradcheck([](auto& v) { return F::batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
            {r({3, 2, 3, 3}), r({2}), r({2})});
  gradcheck([](auto& v) { return F::batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); }, {r({6, 3}), r({3}), r({3})});
  gradcheck([](auto& v) { return F::batch_norm(v[0], Tensor(), Tensor(), v[1], Tensor(), true); },
            {r({2, 3, 5}), r({3})});
  gradcheck([](auto& v) { return F::batch_norm(v[0].transpose(0, 1), Tensor(), Tensor(), Tensor(), Tensor(), true); },
            {r({3, 4, 2})});  // a strided input
  // eval: the running statistics are constants.
  Tensor rm = r({2}), rv = rand({2}, kFloat64) + 0.5;
  gradcheck([&](auto& v) { return F::batch_norm(v[0], rm, rv, v[1], v[2], false); }, {r({3, 2, 2, 2}), r({2}), r({2})});
  // Through the module, its running statistics updated on every call.
  nn::BatchNorm2d bn(2);
  bn->to(kFloat64);
  gradcheck([&](auto& v) { return F::batch_norm(v[0], bn->running_mean, bn->running_var, v[1], v[2], true, 0.1); },
            {r({2, 2, 3, 2}), r({2}), r({2})});
}

TEST_CASE("batch_norm's errors name the op and the shapes") {
  CHECK(error_of([] { F::batch_norm(zeros({2, 3, 4}), Tensor(), Tensor(), ones({4}), Tensor(), true); }) ==
        "batch_norm: input [2, 3, 4] has 3 channels but a weight, bias or running statistic has shape [4]");
  CHECK(error_of([] { F::batch_norm(zeros({5}), Tensor(), Tensor(), Tensor(), Tensor(), true); }) ==
        "batch_norm: expected input [N, C, ...], got [5]");
  CHECK(error_of([] { F::batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true); }) ==
        "batch_norm: expected more than 1 value per channel when training, got input [1, 3]");
  CHECK(error_of([] { F::batch_norm(zeros({2, 3}), zeros({3}), Tensor()); }) ==
        "batch_norm: running_mean and running_var are needed when not training");
  CHECK(error_of([] { F::batch_norm(zeros({2, 3}, kInt64), Tensor(), Tensor(), Tensor(), Tensor(), true); })
            .starts_with("batch_norm_stats: "));
  nn::BatchNorm1d bn(3);
  CHECK(error_of([&] { bn(zeros({2, 3, 4, 5})); }) == "BatchNorm1d(3): expected input [N, 3] or [N, C, L], got [2, 3, 4, 5]");
}

TEST_CASE("a residual block written as torchvision's (out += identity after BatchNorm) gives out + identity's gradients") {
  manual_seed(11);
  nn::Conv2d conv(nn::Conv2dOptions(3, 3, 3).padding(1).bias(false));
  nn::BatchNorm2d bn(3);
  conv->to(kFloat64);
  bn->to(kFloat64);
  Tensor x = randn({2, 3, 4, 4}, kFloat64).requires_grad_();
  auto run = [&](bool in_place) {
    conv->zero_grad();
    bn->zero_grad();
    x.set_grad(Tensor());
    Tensor out = bn(conv(x));
    if (in_place) out += x;
    else out = out + x;
    Tensor loss = (F::relu(out) * F::relu(out)).sum();
    loss.backward();
    return std::vector<Tensor>{loss.detach(), x.grad(), conv->weight.grad(), bn->weight.grad(), bn->bias.grad()};
  };
  std::vector<Tensor> a = run(true), b = run(false);
  for (size_t i = 0; i < a.size(); ++i) CHECK(allclose(a[i], b[i], 1e-12, 1e-12));
}
