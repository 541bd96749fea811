// Tests of nn/: registration order and PyTorch names, state_dict round trips and errors, Linear's
// initialisation, losses against hand-computed values, and device/dtype moves.
#include <doctest/doctest.h>

#include <cmath>
#include <iostream>

#include "nn/api.h"
#include "tests/util/gradcheck.h"

using namespace lockstep;

// The seeds' Model: a Module holding one Linear whose forward reports sizes.
struct Model : nn::Module {
  nn::Linear fc{nullptr};
  std::vector<std::string> log;
  Model(int64_t in, int64_t out) : Module("Model") { fc = register_module("fc", nn::Linear(in, out)); }
  Tensor forward(const Tensor& input) {
    Tensor output = fc->forward(input);
    std::ostringstream os;
    os << "In Model: input size " << input.shape() << " output size " << output.shape();
    log.push_back(os.str());
    return output;
  }
};

struct WithBuffer : nn::Module {
  WithBuffer() : Module("WithBuffer") {
    register_parameter("scale", ones({2}));
    register_buffer("running", zeros({2}));
    inner = register_module("inner", nn::Sequential(nn::Linear(2, 3),
                                                                       nn::ReLU(),
                                                                       nn::Linear(nn::LinearOptions(3, 1).bias(false))));
  }
  nn::Sequential inner{nullptr};
};

static std::vector<std::string> names(const nn::NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& [n, _] : v) out.push_back(n);
  return out;
}

TEST_CASE("parameters come in registration order with PyTorch's dotted names") {
  Model m(5, 2);
  CHECK(names(m.named_parameters()) == std::vector<std::string>{"fc.weight", "fc.bias"});
  WithBuffer w;
  CHECK(names(w.named_parameters()) ==
        std::vector<std::string>{"scale", "inner.0.weight", "inner.0.bias", "inner.2.weight"});
  CHECK(names(w.state_dict()) ==
        std::vector<std::string>{"scale", "inner.0.weight", "inner.0.bias", "inner.2.weight", "running"});
  CHECK(w.parameters().size() == 4);
  CHECK(w.parameters()[1].is_same(std::dynamic_pointer_cast<nn::LinearImpl>((*w.inner)[0])->weight));
  CHECK(w.parameters(false).size() == 1);
  for (auto& p : w.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("the seeds' Model runs and reports sizes") {
  manual_seed(0);
  Model m(5, 2);
  Tensor out = m.forward(randn({30, 5}));
  CHECK(out.shape() == Shape{30, 2});
  CHECK(m.log.back() == "In Model: input size [30, 5] output size [30, 2]");
  CHECK_THROWS_WITH_AS(m.forward(randn({30, 4})), "Linear(5, 2): expected input [..., 5], got [30, 4]", Error);
  // As in LibTorch, a module built directly (no holder, no registration) is called through its type.
  CHECK_THROWS_WITH_AS(m(randn({30, 5})), doctest::Contains("Model: forward(input) is not implemented"), Error);
  m.bind_forward<Model>();
  CHECK(m(randn({30, 5})).shape() == Shape{30, 2});
}

TEST_CASE("Linear uses PyTorch's default initialisation bounds") {
  manual_seed(3);
  nn::Linear l(400, 300);
  double bound = 1.0 / std::sqrt(400.0);
  auto w = l->weight.to_vector<float>();
  float lo = *std::min_element(w.begin(), w.end()), hi = *std::max_element(w.begin(), w.end());
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(lo < -0.99 * bound);  // the whole range is used
  CHECK(hi > 0.99 * bound);
  auto b = l->bias.to_vector<float>();
  CHECK(*std::max_element(b.begin(), b.end()) <= bound);
  CHECK(l->weight.shape() == Shape{300, 400});
  CHECK(l->bias.shape() == Shape{300});
  CHECK(!nn::Linear(nn::LinearOptions(3, 2).bias(false))->bias.defined());
  CHECK_THROWS_WITH_AS(nn::Linear(0, 2), doctest::Contains("must be positive"), Error);
}

TEST_CASE("state_dict round trip and load errors") {
  manual_seed(4);
  WithBuffer a, b;
  CHECK(!internal::allclose(a.parameters()[1], b.parameters()[1]));
  b.load_state_dict(a.state_dict());
  for (size_t i = 0; i < a.parameters().size(); ++i) CHECK(internal::allclose(a.parameters()[i], b.parameters()[i], 0, 0));
  // The loaded values are copies: changing a does not change b.
  internal::fill_(a.parameters()[0], 5.0);
  CHECK(b.parameters()[0].to_vector<float>() == std::vector<float>{1, 1});

  auto sd = a.state_dict();
  sd[1].second = zeros({4, 2});
  CHECK_THROWS_WITH_AS(b.load_state_dict(sd), "load_state_dict: size mismatch for 'inner.0.weight': checkpoint has [4, 2], model has [3, 2]", Error);
  sd = a.state_dict();
  sd[0].second = ones({2}, kFloat64);
  CHECK_THROWS_WITH_AS(b.load_state_dict(sd), doctest::Contains("dtype mismatch for 'scale'"), Error);
  sd = a.state_dict();
  sd.pop_back();
  CHECK_THROWS_WITH_AS(b.load_state_dict(sd), "load_state_dict: missing key(s) in state_dict: [running]", Error);
  b.load_state_dict(sd, false);  // non-strict accepts it
  sd = a.state_dict();
  sd.emplace_back("extra", zeros({1}));
  CHECK_THROWS_WITH_AS(b.load_state_dict(sd), "load_state_dict: unexpected key(s) in state_dict: [extra]", Error);
}

TEST_CASE("registration errors") {
  struct Bad : nn::Module {
    void twice() {
      register_parameter("w", zeros({1}));
      register_buffer("w", zeros({1}));
    }
    void dotted() { register_parameter("a.b", zeros({1})); }
  } bad;
  CHECK_THROWS_WITH_AS(bad.twice(), "Module: name 'w' is already registered", Error);
  CHECK_THROWS_WITH_AS(bad.dotted(), doctest::Contains("invalid name 'a.b'"), Error);
  CHECK_THROWS_WITH_AS(nn::Module()(zeros({1})), doctest::Contains("forward(input) is not implemented"), Error);
}

TEST_CASE("to(dtype), train/eval and zero_grad") {
  Model m(3, 2);
  Tensor w = m.fc->weight;
  m.to(kFloat64);
  CHECK(w.dtype() == kFloat64);  // the handle kept by the field sees the move
  CHECK(m.parameters()[0].dtype() == kFloat64);
  m.eval();
  CHECK(!m.is_training());
  CHECK(!m.fc->is_training());
  m.train();
  CHECK(m.fc->is_training());
  nn::functional::mse_loss(m.forward(ones({4, 3}, kFloat64)), zeros({4, 2}, kFloat64)).backward();
  CHECK(w.grad().defined());
  m.zero_grad(false);
  CHECK(w.grad().to_vector<double>() == std::vector<double>(6, 0.0));
  m.zero_grad();
  CHECK(!w.grad().defined());
}

TEST_CASE("cross entropy matches the definition; bad targets are clear errors") {
  Tensor logits = tensor({1.0, 2.0, 3.0, 0.5, 0.5, -1.0}, {2, 3});
  Tensor target = tensor(std::vector<int64_t>{2, 0});
  double l0 = -(3.0 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
  double l1 = -(0.5 - std::log(2 * std::exp(0.5) + std::exp(-1.0)));
  nn::CrossEntropyLoss ce;
  CHECK(ce(logits, target).item<double>() == doctest::Approx((l0 + l1) / 2));
  // Large logits do not overflow.
  CHECK(ce(tensor({1000.0, 0.0}, {1, 2}), tensor(std::vector<int64_t>{0})).item<double>() == doctest::Approx(0.0));
  manual_seed(5);
  lockstep::testing::gradcheck([&](const std::vector<Tensor>& x) { return ce(x[0], target); }, {randn({2, 3}, kFloat64)});
  CHECK_THROWS_WITH_AS(ce(logits, tensor(std::vector<int64_t>{3, 0})), "cross_entropy: target 3 at position 0 is out of range for 3 classes (input [2, 3], ignore_index -100)", Error);
  CHECK_THROWS_WITH_AS(ce(logits, tensor(std::vector<int64_t>{-1, 0})), doctest::Contains("target -1 at position 0"), Error);
  CHECK_THROWS_WITH_AS(ce(logits, tensor({2.0, 0.0})), "cross_entropy: target [2] float64 is neither int64 class indices [2] nor probabilities of the input's shape [2, 3]", Error);
  CHECK_THROWS_WITH_AS(ce(logits, tensor(std::vector<int64_t>{1})), "cross_entropy: input [2, 3] needs target [2], got [1]", Error);
  CHECK_THROWS_WITH_AS(ce(tensor({1.0, 2.0}), tensor(std::vector<int64_t>{1})), "cross_entropy: input [2] needs target [], got [1]", Error);
}

TEST_CASE("MSELoss") {
  nn::MSELoss mse;
  CHECK(mse(tensor({1.0, 2.0, 3.0}), tensor({1.0, 0.0, 0.0})).item<double>() == doctest::Approx((4.0 + 9.0) / 3));
  CHECK_THROWS_WITH_AS(mse(zeros({2}), zeros({3})), "mse_loss: input [2] and target [3] differ in shape", Error);
}
