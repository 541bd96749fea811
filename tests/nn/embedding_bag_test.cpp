// EmbeddingBag and F::embedding_bag against PyTorch: tests/fixtures/layer_fixtures.safetensors
// ("bag.*" keys, written by tools/fixtures/make_layer_fixtures.py) holds per case the indices, offsets, table,
// per-sample weights and options, PyTorch's float64 output and the gradients of sum(out * gout). Each case
// runs in float64 (to 1e-12) and float32; then the module, a gradcheck and the errors. Part of the
// nn_layers_test binary.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;
namespace F = lockstep::nn::functional;

namespace {

const testing::Fixtures fx("tests/fixtures/layer_fixtures.safetensors", "make_layer_fixtures.py");

F::EmbeddingBagFuncOptions options_of(const std::string& c) {
  const auto opts = fx(c + ".opts").to_vector<int64_t>();
  const nn::EmbeddingBagModeArg modes[] = {nn::kSum, nn::kMean, nn::kMax};
  auto o = F::EmbeddingBagFuncOptions().mode(modes[opts[0]]).include_last_offset(opts[1] != 0);
  if (opts[2] >= 0) o.padding_idx(opts[2]);
  if (fx.contains(c + ".offsets")) o.offsets(fx(c + ".offsets"));
  return o;
}

void run_case(const std::string& c, Dtype dtype, double tol) {
  INFO(c, " ", dtype_name(dtype));
  Tensor weight = fx(c + ".weight").to(dtype).set_requires_grad();
  F::EmbeddingBagFuncOptions o = options_of(c);
  Tensor psw;
  if (fx.contains(c + ".per_sample_weights")) {
    psw = fx(c + ".per_sample_weights").to(dtype).set_requires_grad();
    o.per_sample_weights(psw);
  }
  Tensor out = F::embedding_bag(fx(c + ".input"), weight, o);
  testing::check_close(out, fx(c + ".out"), c + ".out", tol);
  sum(out * fx(c + ".gout").to(dtype)).backward();
  testing::check_close(weight.grad(), fx(c + ".grad.weight"), c + ".grad.weight", tol);
  if (psw.defined()) testing::check_close(psw.grad(), fx(c + ".grad.per_sample_weights"), c + ".grad.psw", tol);
}

}  // namespace

TEST_CASE("embedding_bag matches PyTorch: sum, mean and max, offsets, include_last_offset, weights, padding") {
  int cases = 0;
  for (const std::string& c : fx.cases("bag.")) {
    run_case(c, kFloat64, 1e-12);
    run_case(c, kFloat32, 1e-5);
    ++cases;
  }
  CHECK(cases == 14);
}

TEST_CASE("EmbeddingBag is F::embedding_bag over its table; the padding row starts at zero") {
  manual_seed(0);
  nn::EmbeddingBag bag(nn::EmbeddingBagOptions(6, 3).mode(nn::kSum).padding_idx(-1));
  CHECK(bag->options.padding_idx() == 5);
  CHECK(sum(abs(bag->weight.select(0, 5))).item<double>() == 0);
  CHECK(bag->named_parameters().size() == 1);
  Tensor input = tensor(std::vector<int64_t>{0, 1, 5, 2}, {4}), offsets = tensor(std::vector<int64_t>{0, 2}, {2});
  Tensor y = bag(input, offsets);
  Tensor w = bag->weight.detach();
  CHECK(internal::allclose(y.select(0, 0), w.select(0, 0) + w.select(0, 1), 0, 1e-6));
  CHECK(internal::allclose(y.select(0, 1), w.select(0, 2), 0, 1e-6));  // padding left out
}

TEST_CASE("embedding_bag's gradients pass gradcheck in float64") {
  Tensor input = tensor(std::vector<int64_t>{1, 2, 2, 0, 3, 1}, {6}), offsets = tensor(std::vector<int64_t>{0, 2, 5}, {3});
  for (nn::EmbeddingBagModeArg mode : {nn::EmbeddingBagModeArg(nn::kSum), nn::EmbeddingBagModeArg(nn::kMean),
                                       nn::EmbeddingBagModeArg(nn::kMax)}) {
    testing::gradcheck(
        [&](const std::vector<Tensor>& v) {
          return F::embedding_bag(input, v[0], F::EmbeddingBagFuncOptions().offsets(offsets).mode(mode));
        },
        {randn({4, 3}, kFloat64)});
  }
  testing::gradcheck(
      [&](const std::vector<Tensor>& v) {
        return F::embedding_bag(input, v[0],
                                F::EmbeddingBagFuncOptions().offsets(offsets).mode(nn::kSum).per_sample_weights(v[1]));
      },
      {randn({4, 3}, kFloat64), randn({6}, kFloat64)});
}

TEST_CASE("embedding_bag rejects bad input in PyTorch's words") {
  Tensor w = randn({5, 2}), flat = tensor(std::vector<int64_t>{0, 1, 2}, {3});
  auto offsets = [](std::vector<int64_t> v) { return tensor(v, {static_cast<int64_t>(v.size())}); };
  CHECK(error_of([&] { F::embedding_bag(flat, w); }).find("offsets has to be a 1D Tensor") != std::string::npos);
  CHECK(error_of([&] { F::embedding_bag(flat.view({1, 3}), w, F::EmbeddingBagFuncOptions().offsets(offsets({0}))); })
            .find("input should be 1D") != std::string::npos);
  CHECK(error_of([&] { F::embedding_bag(flat, w, F::EmbeddingBagFuncOptions().offsets(offsets({1, 2}))); })
            .find("offsets[0] has to be 0") != std::string::npos);
  CHECK(error_of([&] { F::embedding_bag(flat, w, F::EmbeddingBagFuncOptions().offsets(offsets({0, 2, 1}))); })
            .find("non-decreasing") != std::string::npos);
  CHECK(error_of([&] {
          F::embedding_bag(flat, w, F::EmbeddingBagFuncOptions().offsets(offsets({0, 2})).include_last_offset(true));
        }).find("the last offset must equal the number of indices (3), got 2") != std::string::npos);
  CHECK(error_of([&] {
          F::embedding_bag(flat, w, F::EmbeddingBagFuncOptions().offsets(offsets({0})).mode(nn::kMean)
                                        .per_sample_weights(ones({3})));
        }).find("only supported for mode='sum' (got mode='mean')") != std::string::npos);
  CHECK(error_of([&] {
          F::embedding_bag(flat, w, F::EmbeddingBagFuncOptions().offsets(offsets({0})).mode(nn::kSum)
                                        .per_sample_weights(ones({2})));
        }).find("same shape as the input") != std::string::npos);
  CHECK(error_of([&] { F::embedding_bag(flat.to(kFloat32), w, F::EmbeddingBagFuncOptions().offsets(offsets({0}))); })
            .find("expected int64 indices") != std::string::npos);
  CHECK(error_of([&] { nn::EmbeddingBag(nn::EmbeddingBagOptions(4, 2).mode(nn::kNone)); }).find("kNone") !=
        std::string::npos);
}
