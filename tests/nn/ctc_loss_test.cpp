// F::ctc_loss and CTCLoss against PyTorch (tests/fixtures/layer_fixtures.safetensors, "ctc.*" keys, written
// by tools/fixtures/make_layer_fixtures.py): padded and concatenated targets, unequal input and target
// lengths, a blank other than 0, every reduction, an impossible target under zero_infinity, an empty
// target, unbatched input; the losses and PyTorch's gradient of log_probs (and of logits through
// log_softmax, where it is the true gradient, which a gradcheck confirms) in float64 and float32. Then the
// module and the errors. Part of the nn_layers_test binary.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
namespace F = lockstep::nn::functional;

namespace {

const testing::Fixtures fx("tests/fixtures/layer_fixtures.safetensors", "make_layer_fixtures.py");

F::CTCLossFuncOptions options_of(const std::string& c) {
  const auto o = fx(c + ".opts").to_vector<int64_t>();
  const nn::Reduction r[] = {nn::kNone, nn::kMean, nn::kSum};
  return F::CTCLossFuncOptions().blank(o[0]).reduction(r[o[1]]).zero_infinity(o[2] != 0);
}

}  // namespace

TEST_CASE("ctc_loss matches PyTorch: targets padded or concatenated, lengths, blank, reductions, zero_infinity") {
  int cases = 0;
  for (const std::string& c : fx.cases("ctc.")) {
    ++cases;
    const bool through = fx.contains(c + ".logits");
    for (Dtype dtype : {kFloat64, kFloat32}) {
      INFO(c, " ", dtype_name(dtype));
      const double tol = dtype == kFloat64 ? 1e-10 : 2e-5;
      Tensor leaf = fx(c + (through ? ".logits" : ".log_probs")).to(dtype).set_requires_grad();
      Tensor lp = through ? log_softmax(leaf, -1) : leaf;
      Tensor out = F::ctc_loss(lp, fx(c + ".targets"), fx(c + ".input_lengths"), fx(c + ".target_lengths"),
                               options_of(c));
      testing::check_close(out, fx(c + ".out"), c + ".out", tol);
      sum(out * fx(c + ".gout").to(dtype)).backward();
      testing::check_close(leaf.grad(), fx(c + ".grad"), c + ".grad", tol);
    }
  }
  CHECK(cases == 7);
}

TEST_CASE("CTCLoss: a target longer than its input costs inf; gradcheck through log_softmax") {
  nn::CTCLoss ctc(nn::CTCLossOptions().reduction(nn::kNone));
  Tensor lp = log_softmax(randn({3, 1, 4}), -1);
  Tensor loss = ctc(lp, tensor(std::vector<int64_t>{1, 2, 3, 1}, {1, 4}), tensor(std::vector<int64_t>{3}, {1}),
                    tensor(std::vector<int64_t>{4}, {1}));
  CHECK(std::isinf(loss.item<double>()));
  // Repeated labels need a blank between them: "1 1" needs 3 frames, so 2 frames cannot hold it.
  Tensor twice = ctc(lp, tensor(std::vector<int64_t>{1, 1}, {1, 2}), tensor(std::vector<int64_t>{2}, {1}),
                     tensor(std::vector<int64_t>{2}, {1}));
  CHECK(std::isinf(twice.item<double>()));
  Tensor targets = tensor(std::vector<int64_t>{1, 2, 2, 1}, {2, 2});
  testing::gradcheck(
      [&](const std::vector<Tensor>& v) {
        return F::ctc_loss(log_softmax(v[0], -1), targets, tensor(std::vector<int64_t>{5, 4}, {2}),
                           tensor(std::vector<int64_t>{2, 1}, {2}));
      },
      {randn({5, 2, 3}, kFloat64)});
}

TEST_CASE("ctc_loss rejects bad input in PyTorch's words") {
  using testing::error_of;
  Tensor lp = log_softmax(randn({3, 2, 5}), -1), t = tensor(std::vector<int64_t>{1, 2, 3, 4, 1, 1}, {2, 3});
  auto ints = [](std::vector<int64_t> v) { return tensor(v, {static_cast<int64_t>(v.size())}); };
  CHECK(error_of([&] { F::ctc_loss(lp, t, ints({4, 3}), ints({3, 1})); })
            .find("Expected input_lengths to have value at most 3, but got value 4") != std::string::npos);
  CHECK(error_of([&] { F::ctc_loss(lp, t, ints({3, 3}), ints({4, 1})); })
            .find("Expected tensor to have size at least 4 at dimension 1") != std::string::npos);
  CHECK(error_of([&] { F::ctc_loss(lp, t, ints({3}), ints({3, 1})); }).find("input_lengths must be of size batch_size") !=
        std::string::npos);
  CHECK(error_of([&] { F::ctc_loss(lp, t, ints({3, 3}), ints({3, 1}), F::CTCLossFuncOptions().blank(5)); })
            .find("blank must be in label range") != std::string::npos);
  CHECK(error_of([&] { F::ctc_loss(lp, ints({1, 7, 2}), ints({3, 3}), ints({2, 1})); }).find("out of range") !=
        std::string::npos);
}
