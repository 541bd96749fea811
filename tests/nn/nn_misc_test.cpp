// The last LibTorch nn names, each a short composition: F::pdist, F::affine_grid (values from PyTorch),
// F::gumbel_softmax (its rules, whatever the draw), ParameterList and ParameterDict; gradchecks and errors.
#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include "nn/api.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;
namespace F = lockstep::nn::functional;

namespace {
void check_values(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = got.to(kFloat64).contiguous().to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(want[i]).epsilon(1e-12));
}
}  // namespace

TEST_CASE("pdist: distances of row pairs (i < j) for p = 2, 1, inf, as torch.pdist") {
  Tensor x = tensor({0.0, 0.0, 3.0, 4.0, 1.0, 1.0}, {3, 2});
  check_values(F::pdist(x), {5.0, 1.4142135623730951, 3.605551275463989});
  check_values(F::pdist(x, 1), {7, 2, 5});
  check_values(F::pdist(x, INFINITY), {4, 1, 3});
  CHECK(F::pdist(tensor({1.0, 2.0}, {1, 2})).shape() == Shape{0});
  testing::gradcheck([](auto& v) { return F::pdist(v[0], 2); }, {randn({4, 3}, kFloat64)});
  CHECK(contains(error_of([] { F::pdist(randn({2, 2, 2})); }), "pdist only supports 2D tensors, got: 3D"));
  CHECK(contains(error_of([] { F::pdist(randn({2, 2}), -1); }), "pdist only supports non-negative p values"));
}

TEST_CASE("affine_grid matches PyTorch in 2-D and 3-D, with and without align_corners") {
  Tensor theta = tensor({0.5, -0.25, 0.1, 0.3, 0.8, -0.2}, {1, 2, 3});
  check_values(F::affine_grid(theta, {1, 1, 2, 3}),
               {-0.10833333333333331, -0.8, 0.225, -0.6000000000000001, 0.5583333333333333, -0.4, -0.3583333333333333,
                2.7755575615628914e-17, -0.024999999999999994, 0.2, 0.30833333333333335, 0.39999999999999997});
  check_values(F::affine_grid(theta, {1, 1, 2, 3}, true),
               {-0.15, -1.3, 0.35, -1.0, 0.85, -0.7, -0.65, 0.3, -0.15, 0.6000000000000001, 0.35, 0.9000000000000001});
  CHECK(F::affine_grid(theta, {1, 1, 2, 3}).shape() == Shape{1, 2, 3, 2});
  Tensor theta3 = tensor({1.0, 0.0, 0.0, 0.5, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0, -1.0}, {1, 3, 4});
  Tensor grid3 = F::affine_grid(theta3, {1, 1, 2, 1, 2});
  CHECK(grid3.shape() == Shape{1, 2, 1, 2, 3});
  check_values(grid3, {0.0, 0.0, -1.5, 1.0, 0.0, -1.5, 0.0, 0.0, -0.5, 1.0, 0.0, -0.5});
  testing::gradcheck([](auto& v) { return F::affine_grid(v[0], {2, 3, 3, 4}); }, {randn({2, 2, 3}, kFloat64)});
  CHECK(contains(error_of([] { F::affine_grid(randn({1, 2, 3}), {1, 1, 2}); }), "affine_grid only supports 4D and 5D"));
  CHECK(contains(error_of([] { F::affine_grid(randn({1, 3, 4}), {1, 1, 2, 3}); }), "Nx2x3"));
}

TEST_CASE("gumbel_softmax: soft samples are distributions, hard ones one-hot with the soft gradient") {
  manual_seed(7);
  Tensor logits = randn({5, 4}, kFloat64).set_requires_grad();
  Tensor soft = F::gumbel_softmax(logits, F::GumbelSoftmaxFuncOptions().tau(0.5));
  CHECK(allclose(sum(soft, 1), ones({5}, kFloat64)));
  CHECK(soft.min().item<double>() >= 0);
  Tensor hard = F::gumbel_softmax(logits, F::GumbelSoftmaxFuncOptions().hard(true).dim(1));
  // One 1 per row, zeros elsewhere (hard - y + y: equal to 0 and 1 up to a rounding of y).
  Tensor picked = hard.detach().gt(0.5);
  CHECK(picked.sum().item<int64_t>() == 5);
  CHECK(allclose(sum(picked.to(kFloat64), 1), ones({5}, kFloat64)));
  CHECK(allclose(hard.detach(), picked.to(kFloat64), 0, 1e-15));
  // Straight-through: the gradient of sum(hard * w) is that of the soft sample's, which sums to 0 per row.
  sum(hard * randn({5, 4}, kFloat64)).backward();
  CHECK(allclose(sum(logits.grad(), 1), zeros({5}, kFloat64), 0, 1e-12));
  CHECK(contains(error_of([&] { F::gumbel_softmax(logits, F::GumbelSoftmaxFuncOptions().tau(0)); }), "tau must be positive"));
}

TEST_CASE("ParameterList and ParameterDict register their tensors as parameters, in order") {
  nn::ParameterList list;
  list->append(zeros({2}));
  list->extend({ones({3}), full({1}, 2.0)});
  CHECK(list->size() == 3);
  CHECK(list->parameters().size() == 3);
  CHECK(list->named_parameters()[1].first == "1");
  CHECK((*list)[2].item<float>() == 2.0f);
  CHECK((*list)[0].requires_grad());
  CHECK(contains(error_of([&] { (*list)[3]; }), "ParameterList: index 3 out of range for 3"));
  nn::ParameterDict dict;
  dict->insert("scale", ones({4}));
  dict->insert("shift", zeros({4}), /*requires_grad=*/false);
  CHECK(dict->keys() == std::vector<std::string>{"scale", "shift"});
  CHECK(dict->named_parameters()[0].first == "scale");
  CHECK(!(*dict)["shift"].requires_grad());
  CHECK(contains(error_of([&] { dict->insert("scale", ones({1})); }), "key 'scale' is already present"));
  CHECK(contains(error_of([&] { (*dict)["bias"]; }), "no key 'bias'"));
}

namespace {
struct PrintNetImpl : nn::Module {
  PrintNetImpl() {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1).bias(false)));
    seq = register_module("seq", nn::Sequential(nn::Linear(4, 2), nn::ReLU(), nn::Dropout(0.25)));
    bn = register_module("bn", nn::BatchNorm2d(8));
    emb = register_module("emb", nn::Embedding(10, 3));
    norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({6})));
    up = register_module("up", nn::ConvTranspose2d(nn::ConvTranspose2dOptions(8, 4, 4).stride(2).output_padding(1)));
  }
  nn::Conv2d conv{nullptr};
  nn::Sequential seq{nullptr};
  nn::BatchNorm2d bn{nullptr};
  nn::Embedding emb{nullptr};
  nn::LayerNorm norm{nullptr};
  nn::ConvTranspose2d up{nullptr};
};
LOCKSTEP_MODULE(PrintNet);
}  // namespace

TEST_CASE("a module tree prints as PyTorch's print(model), options included") {
  PrintNet net;
  std::ostringstream os, holder;
  os << *net;
  holder << net;
  CHECK(os.str() ==
        "(anonymous namespace)::PrintNetImpl(\n"
        "  (conv): Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=false)\n"
        "  (seq): Sequential(\n"
        "    (0): Linear(in_features=4, out_features=2, bias=true)\n"
        "    (1): ReLU()\n"
        "    (2): Dropout(p=0.25)\n"
        "  )\n"
        "  (bn): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)\n"
        "  (emb): Embedding(10, 3)\n"
        "  (norm): LayerNorm([6], eps=1e-05, elementwise_affine=true)\n"
        "  (up): ConvTranspose2d(8, 4, kernel_size=(4, 4), stride=(2, 2), output_padding=(1, 1))\n"
        ")");
  CHECK(holder.str() == os.str());
}
