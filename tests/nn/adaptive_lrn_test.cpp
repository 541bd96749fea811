// CrossMapLRN2d and AdaptiveLogSoftmaxWithLoss against PyTorch (tests/fixtures/layer_fixtures.safetensors,
// "lrn.*" and "asm.*" keys, written by tools/fixtures/make_layer_fixtures.py): CrossMapLRN2d's outputs for
// odd and even window sizes and fewer channels than the window, and its gradients for the odd sizes;
// AdaptiveLogSoftmaxWithLoss loaded with PyTorch's parameters: output, loss, log_prob, predict and the
// gradients of the loss for the input and every parameter, in float64. Then names, shapes and errors.
// Part of the nn_layers_test binary.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/test_util.h"

using namespace lockstep;

namespace {

const testing::Fixtures fx("tests/fixtures/layer_fixtures.safetensors", "make_layer_fixtures.py");

}  // namespace

TEST_CASE("CrossMapLRN2d matches LibTorch's values and gradients") {
  for (const std::string c : {"lrn.size5", "lrn.size4", "lrn.size3_few_channels"}) {
    INFO(c);
    const auto o = fx(c + ".opts").to_vector<double>();
    nn::CrossMapLRN2d lrn(nn::CrossMapLRN2dOptions(static_cast<int64_t>(o[0])).alpha(o[1]).beta(o[2])
                              .k(static_cast<int64_t>(o[3])));
    Tensor x = fx(c + ".x").set_requires_grad();
    Tensor y = lrn(x);
    testing::check_close(y, fx(c + ".out"), c + ".out", 1e-12);
    sum(y * fx(c + ".gout")).backward();
    // The fixtures come from Python's CrossMapLRN2d, whose backward window for an even size is placed by a
    // float division ((size - 1) / 2 = 1.5 -> offset 2) where LibTorch's, which this follows, divides
    // integers (offset 3): the gradients agree for odd sizes only.
    if (static_cast<int64_t>(o[0]) % 2 == 1) testing::check_close(x.grad(), fx(c + ".grad"), c + ".grad", 1e-12);
  }
  CHECK(testing::error_of([] { nn::CrossMapLRN2d(3)(randn({2, 3, 4})); }).find("Expected input to be 4D, got 3D") !=
        std::string::npos);
}

TEST_CASE("AdaptiveLogSoftmaxWithLoss matches PyTorch: output, loss, log_prob, predict, gradients") {
  for (const std::string c : {"asm.two_clusters", "asm.head_bias_div2"}) {
    INFO(c);
    const auto o = fx(c + ".opts").to_vector<double>();
    std::vector<int64_t> cutoffs(o.begin() + 4, o.end());
    nn::AdaptiveLogSoftmaxWithLoss m(nn::AdaptiveLogSoftmaxWithLossOptions(static_cast<int64_t>(o[0]),
                                                                           static_cast<int64_t>(o[1]), cutoffs)
                                         .div_value(o[2])
                                         .head_bias(o[3] != 0));
    m->to(kFloat64);
    {
      NoGradGuard no_grad;
      for (auto& [name, p] : m->named_parameters()) {
        REQUIRE(fx.contains(c + ".param." + name));
        Tensor want = fx(c + ".param." + name);
        REQUIRE(p.shape() == want.shape());
        internal::copy_(p, want);
      }
      CHECK(m->named_parameters().size() == (o[3] != 0 ? 2 : 1) + 2 * (cutoffs.size()));
    }
    Tensor x = fx(c + ".input").set_requires_grad();
    auto [output, loss] = m(x, fx(c + ".target"));
    testing::check_close(output, fx(c + ".output"), c + ".output", 1e-12);
    testing::check_close(loss, fx(c + ".loss"), c + ".loss", 1e-12);
    testing::check_close(m->log_prob(x.detach()), fx(c + ".log_prob"), c + ".log_prob", 1e-12);
    CHECK(sum(ne(m->predict(x.detach()), fx(c + ".predict"))).item<double>() == 0);
    loss.backward();
    testing::check_close(x.grad(), fx(c + ".grad.input"), c + ".grad.input", 1e-12);
    for (auto& [name, p] : m->named_parameters())
      testing::check_close(p.grad(), fx(c + ".grad." + name), c + ".grad." + name, 1e-12);
  }
}

TEST_CASE("AdaptiveLogSoftmaxWithLoss rejects bad cutoffs and targets in PyTorch's words") {
  using testing::error_of;
  CHECK(error_of([] { nn::AdaptiveLogSoftmaxWithLoss(nn::AdaptiveLogSoftmaxWithLossOptions(8, 10, {5, 3})); }).find("cutoffs should be a sequence") !=
        std::string::npos);
  CHECK(error_of([] { nn::AdaptiveLogSoftmaxWithLoss(nn::AdaptiveLogSoftmaxWithLossOptions(8, 10, {3, 10})); }).find("between 1 and n_classes-1") !=
        std::string::npos);
  CHECK(error_of([] { nn::AdaptiveLogSoftmaxWithLoss(nn::AdaptiveLogSoftmaxWithLossOptions(8, 10, {3, 6})); })
            .find("cluster 1's projection is 8 // 4^2 = 0 features") != std::string::npos);
  nn::AdaptiveLogSoftmaxWithLoss m(nn::AdaptiveLogSoftmaxWithLossOptions(16, 10, {3, 6}));
  CHECK(error_of([&] { m(randn({2, 16}), tensor(std::vector<int64_t>{1, 10}, {2})); })
            .find("Target values should be in [0, 9], but values in range [1, 10] were found") != std::string::npos);
  CHECK(error_of([&] { m(randn({2, 16}), tensor(std::vector<int64_t>{1, 2, 3}, {3})); })
            .find("same size in the batch dimension") != std::string::npos);
}
