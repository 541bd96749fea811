// In-place methods and compound assignment: values worked out by hand, aliasing through views,
// PyTorch's dtype and broadcast rules, the grad-mode rules (a leaf that requires grad is refused outside
// NoGradGuard), in-place ops recorded into a tensor's history (gradients by hand and against the
// out-of-place ops), and the version check that refuses a backward through a tensor changed after use.
// Also the factories that follow a tensor (zeros_like, rand_like, new_zeros, ...).
#include <doctest/doctest.h>

#include <functional>

#include "autograd/api.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using testing::expect_error;

TEST_CASE("add_, sub_, mul_, div_, clamp_, fill_, zero_ and the operators write in place") {
  Tensor x = tensor({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  Tensor alias = x.view({4});  // a view sees every write
  x.add_(tensor({10.0f, 20.0f}));  // broadcast over rows: [[11, 22], [13, 24]]
  CHECK(alias.to_vector<float>() == std::vector<float>{11, 22, 13, 24});
  x.sub_(ones({2, 2}), 2.0);  // alpha: -= 2
  CHECK(alias.to_vector<float>() == std::vector<float>{9, 20, 11, 22});
  x.mul_(0.5).div_(tensor({1.0f, 2.0f}));  // chainable: [[4.5, 5], [5.5, 5.5]]
  CHECK(alias.to_vector<float>() == std::vector<float>{4.5f, 5, 5.5f, 5.5f});
  x += 1.0;
  x -= tensor({0.5f});
  x *= 2.0;
  x /= full({2, 2}, 4.0f);  // ((v + 1 - 0.5) * 2) / 4 = (v + 0.5) / 2
  CHECK(alias.to_vector<float>() == std::vector<float>{2.5f, 2.75f, 3, 3});
  x.clamp_(2.6, 2.9);
  CHECK(alias.to_vector<float>() == std::vector<float>{2.6f, 2.75f, 2.9f, 2.9f});
  x.select(0, 1).fill_(7);  // through a view
  CHECK(alias.to_vector<float>() == std::vector<float>{2.6f, 2.75f, 7, 7});
  x.zero_();
  CHECK(alias.to_vector<float>() == std::vector<float>(4, 0.f));
  // float64 operands into a float32 tensor are converted; integer tensors take integers.
  Tensor i = arange(4);
  i.add_(tensor(std::vector<int64_t>{1, 1, 1, 1})).mul_(3.0);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{3, 6, 9, 12});
  // data(): the same storage, no grad.
  Tensor w = ones({2}).requires_grad_();
  Tensor d = w.data();
  CHECK(!d.requires_grad());
  d.mul_(3.0);
  CHECK(w.to_vector<float>() == std::vector<float>{3, 3});
}

TEST_CASE("in-place errors: shapes, dtypes, grad mode, operands that require grad") {
  Tensor x = zeros({2, 3});
  expect_error("operand that does not broadcast", [&] { x.add_(ones({3, 3})); }, {"add_", "[2, 3]", "[3, 3]"});
  expect_error("result larger than self", [&] { x.mul_(ones({4, 2, 3})); }, {"mul_", "[4, 2, 3]", "[2, 3]"});
  Tensor i = arange(3);
  expect_error("float into int64", [&] { i.add_(ones({3})); }, {"add_", "float32", "int64"});
  expect_error("float scalar into int64", [&] { i.mul_(0.5); }, {"mul_", "0.5", "int64"});
  expect_error("div_ of int64", [&] { i.div_(2.0); }, {"div_", "int64"});
  expect_error("undefined", [] { Tensor u; u.add_(1.0); }, {"add_", "undefined"});
  expect_error("undefined operand with alpha", [&] { x.sub_(Tensor(), 2.0); }, {"sub_", "operand is undefined"});
  Tensor w = ones({3}).requires_grad_();
  expect_error("leaf that requires grad", [&] { w.sub_(1.0); }, {"sub_", "leaf", "requires grad", "NoGradGuard"});
  expect_error("leaf through +=", [&] { w += 1.0; }, {"add_", "leaf"});
  Tensor y = w * 2.0;
  expect_error("a view of a tensor that requires grad", [&] { y.view({3, 1}).mul_(2.0); }, {"mul_", "view", "[3, 1]"});
  expect_error("operand that requires grad into a view", [&] { x.select(0, 0).add_(w); },
               {"add_", "shares its storage", "[3]"});
  expect_error("clamp_ of a leaf", [&] { w.clamp_(0.0); }, {"clamp_", "leaf"});
  expect_error("zero_ of a leaf", [&] { w.zero_(); }, {"fill_", "leaf"});
}

TEST_CASE("manual SGD under NoGradGuard, as torch.no_grad(): w -= lr * grad") {
  Tensor w = tensor({1.0, -2.0}).requires_grad_();
  Tensor x = tensor({3.0, 4.0});
  for (int step = 0; step < 2; ++step) {
    Tensor loss = (w * x).sum();  // d/dw = x
    loss.backward();
    {
      NoGradGuard no_grad;
      w.sub_(w.grad(), 0.1);
      w.grad().zero_();
    }
  }
  // Two steps of w -= 0.1 * x: [1 - 0.6, -2 - 0.8].
  CHECK(w.to_vector<double>()[0] == doctest::Approx(0.4));
  CHECK(w.to_vector<double>()[1] == doctest::Approx(-2.8));
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
}

// Gradients of w through f (a scalar function of w), as float64 vectors.
static std::vector<double> grad_of(const Tensor& w, const std::function<Tensor()>& f) {
  if (w.grad().defined()) w.grad().zero_();
  f().backward();
  return w.grad().to_vector<double>();
}

TEST_CASE("in-place ops on tensors with a history are recorded: gradients by hand") {
  Tensor a = tensor({1.0, -2.0, 3.0}).requires_grad_();
  Tensor b = tensor({2.0, 4.0, -0.5}).requires_grad_();
  SUBCASE("out += identity (a residual add into an activation), then a product") {
    Tensor out = a * 2.0;  // non-leaf
    out += b;
    CHECK(out.grad_fn()->name() == "add_");
    CHECK(out.to_vector<double>() == std::vector<double>{4, 0, 5.5});
    (out * out).sum().backward();  // d/da = 2 out * 2, d/db = 2 out
    CHECK(a.grad().to_vector<double>() == std::vector<double>{16, 0, 22});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{8, 0, 11});
  }
  SUBCASE("add_ and sub_ with alpha, and the scalar forms") {
    Tensor y = a * 1.0;
    y.add_(b, 3.0).sub_(b, 0.5).mul_(2.0).add_(1.0).div_(4.0);  // ((a + 2.5 b) * 2 + 1) / 4
    y.sum().backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 0.5, 0.5});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{1.25, 1.25, 1.25});
  }
  SUBCASE("mul_ and div_ by an operand that requires grad") {
    Tensor y = a * 1.0;
    y.mul_(b);  // a b: d/da = b, d/db = a (the old value, kept before the write)
    y.sum().backward();
    CHECK(a.grad().to_vector<double>() == b.to_vector<double>());
    CHECK(b.grad().to_vector<double>() == a.to_vector<double>());
    Tensor z = a + 0.0;
    z.div_(b);  // a / b: d/da = 1 / b, d/db = -a / b^2
    a.grad().zero_();
    b.grad().zero_();
    z.sum().backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 0.25, -2});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{-0.25, 0.125, -12});
  }
  SUBCASE("t *= t: the operand is the tensor itself") {
    Tensor y = a * 1.0;
    y *= y;  // a^2
    y.sum().backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{2, -4, 6});
  }
  SUBCASE("clamp_, masked_fill_, fill_ and copy_") {
    Tensor y = a * 1.0;
    y.clamp_(-2.0, 2.0);  // the gradient passes where -2 <= a <= 2 (inclusive, as clamp's)
    y.sum().backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 1, 0});
    Tensor m = a * 3.0;
    m.masked_fill_(a < 0.0, -1e9);  // masks a[1]
    CHECK(m.to_vector<double>() == std::vector<double>{3, -1e9, 9});
    CHECK(grad_of(a, [&] { return m.sum(); }) == std::vector<double>{3, 0, 3});
    Tensor f = a * 1.0;
    f.fill_(2.0);  // no gradient reaches a through f
    CHECK(f.requires_grad());
    CHECK(grad_of(a, [&] { return (f * a).sum(); }) == std::vector<double>{2, 2, 2});
    Tensor c = a * 1.0;
    c.copy_(b * 2.0);  // c's old history gets nothing; b gets 2
    CHECK(grad_of(a, [&] { return (c * a).sum(); }) == std::vector<double>{4, 8, -1});  // only c * a's a
    CHECK(b.grad().to_vector<double>() == std::vector<double>{2 * 1, 2 * -2, 2 * 3});
  }
  SUBCASE("a tensor without a history takes one from the operand") {
    Tensor buf = zeros({3}, kFloat64);
    buf.add_(a);
    CHECK(buf.requires_grad());
    buf.add_(b, 2.0);
    (buf * buf).sum().backward();  // buf = a + 2b: d/da = 2 buf, d/db = 4 buf
    CHECK(a.grad().to_vector<double>() == std::vector<double>{10, 12, 4});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{20, 24, 8});
    Tensor into = zeros({3}, kFloat32);  // copy_ converts, and the gradient converts back
    into.copy_(a);
    (into * 2.0).sum().backward();
    CHECK(a.grad().dtype() == kFloat64);
    CHECK(a.grad().to_vector<double>() == std::vector<double>{12, 14, 6});
  }
  SUBCASE("a broadcast operand gets its gradient summed over the broadcast dimensions") {
    Tensor x = (a.view({1, 3}) * ones({2, 3}, kFloat64));  // [2, 3]
    Tensor bias = tensor({1.0, 2.0, 3.0}).requires_grad_();
    x.add_(bias).mul_(bias);  // (a + bias) * bias per row
    x.sum().backward();
    // d/dbias = 2 rows * (a + 2 bias); d/da = 2 rows * bias
    CHECK(bias.grad().to_vector<double>() == std::vector<double>{6, 4, 18});
    CHECK(a.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  }
}

TEST_CASE("in-place ops give the out-of-place ops' gradients (float64, random values)") {
  manual_seed(3);
  Tensor a = randn({4, 5}, kFloat64).requires_grad_();
  Tensor b = (rand({5}, kFloat64) + 0.5).requires_grad_();
  auto both = [&](const std::function<Tensor()>& f) {
    std::vector<double> ga = grad_of(a, f);
    return std::pair{ga, b.grad().defined() ? b.grad().to_vector<double>() : std::vector<double>{}};
  };
  auto check_same = [&](const std::function<Tensor()>& in_place, const std::function<Tensor()>& out_of_place) {
    if (b.grad().defined()) b.grad().zero_();
    auto [ia, ib] = both(in_place);
    b.grad().zero_();
    auto [oa, ob] = both(out_of_place);
    REQUIRE(ia.size() == oa.size());
    for (size_t i = 0; i < ia.size(); ++i) CHECK(ia[i] == doctest::Approx(oa[i]).epsilon(1e-12));
    for (size_t i = 0; i < ib.size(); ++i) CHECK(ib[i] == doctest::Approx(ob[i]).epsilon(1e-12));
  };
  check_same([&] { Tensor y = a.sin(); y.mul_(b).add_(b, -0.5).div_(b); return (y * y).sum(); },
             [&] { Tensor y = ((a.sin() * b) - b * 0.5) / b; return (y * y).sum(); });
  check_same([&] { Tensor y = a.sigmoid() * 4.0; y.clamp_(0.5, 3.0).sub_(b); return (y * a).sum(); },
             [&] { Tensor y = clamp(a.sigmoid() * 4.0, 0.5, 3.0) - b; return (y * a).sum(); });
}

TEST_CASE("backward after an in-place op on a tensor an op kept: PyTorch's errors") {
  Tensor a = tensor({1.0, 2.0}).requires_grad_();
  Tensor w = tensor({3.0, 4.0}).requires_grad_();
  Tensor e = a.exp();  // exp keeps its output for backward (so do tanh, sigmoid, softmax, sqrt, ...)
  e.add_(1.0);
  expect_error("saved output changed by a recorded op", [&] { e.sum().backward(); }, {"the output of exp", "version"});
  Tensor y = a * 2.0;
  Tensor z = y * w;  // mul keeps y for w's gradient
  y.add_(1.0);
  expect_error("saved input changed", [&] { z.sum().backward(); }, {"input 0 of mul", "version 1"});
  Tensor r = a * w;  // mul keeps a and w, not its output: changing r is fine
  r.add_(1.0);
  r.sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3, 4});
}

TEST_CASE("backward refuses a tensor changed in place after an op used it (version counter)") {
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  Tensor x = tensor({3.0, 4.0});
  CHECK(x.version() == 0);
  Tensor y = (w * x).sum();  // mul saves x for w's gradient
  x.mul_(2.0);
  CHECK(x.version() == 1);
  CHECK(x.view({2}).version() == 1);  // views share the counter
  expect_error("input changed after use", [&] { y.backward(); },
               {"modified by an inplace operation", "mul", "version 1", "expected version 0"});
  // The weight itself, changed under NoGradGuard between forward and backward.
  Tensor z = (w * x).sum();
  {
    NoGradGuard no_grad;
    w.add_(1.0);
  }
  expect_error("weight changed after use", [&] { z.backward(); }, {"modified by an inplace operation"});
  // An output an op saved (exp keeps its result), changed under NoGradGuard.
  Tensor e = w.exp();
  {
    NoGradGuard no_grad;
    e.mul_(2.0);
  }
  expect_error("saved output changed", [&] { e.backward(ones({2}, kFloat64)); }, {"the output of", "exp"});
  // Changing after backward is fine, and a new forward sees the new values.
  Tensor ok = (w * x).sum();
  ok.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{6, 8});
}

TEST_CASE("zeros_like, ones_like, full_like, rand_like, randn_like and new_zeros/new_ones/new_full/new_empty") {
  Tensor t = zeros({2, 3}, kFloat64);
  CHECK(full_like(t, 2.5).to_vector<double>() == std::vector<double>(6, 2.5));
  CHECK(full_like(t, 2.5).dtype() == kFloat64);
  CHECK(ones_like(t).to_vector<double>() == std::vector<double>(6, 1));
  manual_seed(5);
  Tensor r = rand_like(t);
  manual_seed(5);
  CHECK(allclose(r, rand({2, 3}, kFloat64), 0, 0));  // the same draws as rand with t's shape and dtype
  CHECK(r.dtype() == kFloat64);
  manual_seed(5);
  Tensor n = randn_like(t);
  manual_seed(5);
  CHECK(allclose(n, randn({2, 3}, kFloat64), 0, 0));
  expect_error("rand_like of int64", [] { rand_like(arange(3)); }, {"rand_like", "int64"});
  expect_error("randn_like of int64", [] { randn_like(arange(3)); }, {"randn_like", "int64"});
  Tensor i = arange(3);
  CHECK(i.new_zeros({2}).dtype() == kInt64);
  CHECK(i.new_zeros({2}).to_vector<int64_t>() == std::vector<int64_t>{0, 0});
  CHECK(t.new_ones({1, 4}).shape() == Shape{1, 4});
  CHECK(t.new_ones({1, 4}).to_vector<double>() == std::vector<double>(4, 1));
  CHECK(t.new_full({3}, -1).to_vector<double>() == std::vector<double>(3, -1));
  CHECK(t.new_empty({5}).dtype() == kFloat64);
  CHECK(t.new_empty({5}).shape() == Shape{5});
}
