// Tests of optim/: SGD trajectories worked out by hand from torch.optim.SGD's rule, options
// validation, and an MLP that learns a separable problem end to end.
#include <doctest/doctest.h>

#include "nn/api.h"
#include "optim/api.h"

using namespace lockstep;

// Three steps on loss = 0.5 * p^2 (gradient p), from p = 1.
static std::vector<double> trajectory(optim::SGDOptions o, int steps = 3) {
  Tensor p = tensor({1.0}).set_requires_grad();
  optim::SGD sgd({p}, o);
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    sgd.zero_grad();
    (p * p * 0.5).sum().backward();
    sgd.step();
    out.push_back(p.item<double>());
  }
  return out;
}

static void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("SGD follows torch.optim.SGD's update rule") {
  // Plain: p <- p - lr * p.
  check_close(trajectory(optim::SGDOptions(0.1), 2), {0.9, 0.81});
  // Momentum 0.9: buf = g on the first step, then 0.9 * buf + g.
  //   g=1    buf=1     p=0.9
  //   g=0.9  buf=1.8   p=0.72
  //   g=0.72 buf=2.34  p=0.486
  check_close(trajectory(optim::SGDOptions(0.1).set_momentum(0.9)), {0.9, 0.72, 0.486});
  // Nesterov: d = g + 0.9 * buf.
  //   g=1    buf=1     d=1.9    p=0.81
  //   g=0.81 buf=1.71  d=2.349  p=0.5751
  check_close(trajectory(optim::SGDOptions(0.1).set_momentum(0.9).set_nesterov(true), 2), {0.81, 0.5751});
  // Weight decay 0.1, momentum 0.5, dampening 0.5 (the first buffer is not dampened):
  //   g=1.1    buf=1.1                     p=0.89
  //   g=0.979  buf=0.5*1.1+0.5*0.979=1.0395 p=0.78605
  check_close(trajectory(optim::SGDOptions(0.1).set_momentum(0.5).set_dampening(0.5).set_weight_decay(0.1), 2),
              {0.89, 0.78605});
}

TEST_CASE("SGD skips parameters without gradients and validates its options") {
  Tensor a = tensor({1.0}).set_requires_grad(), b = tensor({2.0}).set_requires_grad();
  optim::SGD sgd({a, b}, optim::SGDOptions(0.5).set_momentum(0.9));
  (a * 2.0).sum().backward();
  sgd.step();
  CHECK(a.item<double>() == 0.0);
  CHECK(b.item<double>() == 2.0);
  CHECK(!sgd.momentum_buffer(1).defined());
  CHECK_THROWS_WITH_AS(optim::SGD({a}, optim::SGDOptions(-1)), "SGD: invalid learning rate -1", Error);
  CHECK_THROWS_WITH_AS(optim::SGD({a}, optim::SGDOptions(0.1).set_nesterov(true)), doctest::Contains("nesterov"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({a, a}, optim::SGDOptions(0.1)), doctest::Contains("appears twice"), Error);
  CHECK_THROWS_WITH_AS(optim::SGD({tensor({1.0})}, optim::SGDOptions(0.1)), doctest::Contains("not a leaf tensor that requires grad"), Error);
}

TEST_CASE("an MLP learns a separable problem to more than 95% accuracy") {
  manual_seed(7);
  // Two Gaussian blobs per class in 2-D, four classes at the corners of a square.
  const int64_t n = 512;
  Tensor labels = randint(0, 4, {n});
  auto lab = labels.to_vector<int64_t>();
  std::vector<float> pts(n * 2);
  auto noise = randn({n, 2}).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    pts[2 * i] = (lab[i] & 1 ? 2.f : -2.f) + 0.5f * noise[2 * i];
    pts[2 * i + 1] = (lab[i] & 2 ? 2.f : -2.f) + 0.5f * noise[2 * i + 1];
  }
  Tensor x = tensor(pts, {n, 2});
  auto model = nn::Sequential(
      nn::Linear(2, 16), nn::ReLU(), nn::Linear(16, 4));
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  nn::CrossEntropyLoss ce;
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 50; ++epoch) {
    sgd.zero_grad();
    Tensor loss = ce((*model)(x), labels);
    loss.backward();
    sgd.step();
    (epoch == 0 ? first : last) = loss.item<float>();
  }
  CHECK(last < first / 4);
  NoGradGuard no_grad;
  model->eval();
  int64_t correct = (*model)(x).argmax(1).eq(labels).sum().item<int64_t>();
  CHECK(correct > 0.95 * n);
}
