// Tests of the autograd layer: every differentiable op against finite differences, accumulation,
// graph freeing, grad mode, detach, hooks and callbacks.
#include <doctest/doctest.h>

#include "autograd/api.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::gradcheck;

static Tensor r(const Shape& s) { return randn(s, kFloat64); }
static Tensor positive(const Shape& s) { return internal::add(rand(s, kFloat64), 0.5); }

TEST_CASE("gradients of elementwise ops, with broadcasting") {
  manual_seed(0);
  using V = const std::vector<Tensor>&;
  gradcheck([](V x) { return x[0] + x[1]; }, {r({3, 4}), r({4})});
  gradcheck([](V x) { return x[0] - x[1]; }, {r({3, 1}), r({1, 4})});
  gradcheck([](V x) { return x[0] * x[1]; }, {r({2, 3, 4}), r({3, 1})});
  gradcheck([](V x) { return x[0] / x[1]; }, {r({3, 4}), positive({4})});
  gradcheck([](V x) { return x[0] * 3.0 + 1.0; }, {r({5})});
  gradcheck([](V x) { return 2.0 - x[0]; }, {r({5})});
  gradcheck([](V x) { return 2.0 / x[0]; }, {positive({5})});
  gradcheck([](V x) { return -x[0]; }, {r({5})});
  gradcheck([](V x) { return exp(x[0]); }, {r({2, 3})});
  gradcheck([](V x) { return log(x[0]); }, {positive({2, 3})});
  // relu away from its kink at 0, where the finite difference is meaningless.
  Tensor away = internal::add(r({10}), 0.0);
  {
    double* p = away.data<double>();
    for (int i = 0; i < 10; ++i) p[i] = p[i] > 0 ? p[i] + 0.1 : p[i] - 0.1;
  }
  gradcheck([](V x) { return relu(x[0]); }, {away});
}

TEST_CASE("gradients of matrix products, reshapes and reductions") {
  manual_seed(1);
  using V = const std::vector<Tensor>&;
  gradcheck([](V x) { return matmul(x[0], x[1]); }, {r({3, 4}), r({4, 2})});
  gradcheck([](V x) { return linear(x[0], x[1], x[2]); }, {r({5, 3}), r({2, 3}), r({2})});
  gradcheck([](V x) { return linear(x[0], x[1]); }, {r({5, 3}), r({2, 3})});
  gradcheck([](V x) { return x[0].t(); }, {r({3, 2})});
  gradcheck([](V x) { return x[0].reshape({3, -1}) * x[1]; }, {r({2, 6}), r({4})});
  gradcheck([](V x) { return x[0].sum(); }, {r({3, 4})});
  gradcheck([](V x) { return x[0].sum(1); }, {r({3, 4})});
  gradcheck([](V x) { return x[0].sum(0, true); }, {r({3, 4})});
  gradcheck([](V x) { return x[0].mean(); }, {r({3, 4})});
  gradcheck([](V x) { return x[0].mean(-1, true); }, {r({2, 3, 4})});
  gradcheck([](V x) { return std::get<0>(x[0].max(1)); }, {r({4, 5})});
  gradcheck([](V x) { return std::get<0>(x[0].max(1)); }, {r({2, 3, 4})});
  gradcheck([](V x) { return std::get<0>(x[0].max(0, true)); }, {r({3, 2})});
}

TEST_CASE("linear: the output starts as a copy of the bias, never the bias itself") {
  // One row: the bias expanded to [1, out] is already contiguous, and writing the product into that
  // view would overwrite the bias.
  Tensor x = tensor({1.0, 2.0, 3.0}, {1, 3}), w = tensor({1.0, 0.0, 0.0, 0.0, 1.0, 1.0}, {2, 3});
  Tensor b = tensor({10.0, 20.0});
  for (int i = 0; i < 2; ++i) CHECK(linear(x, w, b).to_vector<double>() == std::vector<double>{11.0, 25.0});
  CHECK(b.to_vector<double>() == std::vector<double>{10.0, 20.0});
  CHECK(linear(zeros({0, 3}, kFloat64), w, b).shape() == Shape{0, 2});
}

TEST_CASE("gradients of log_softmax, cross entropy, index_select and conversions") {
  manual_seed(2);
  using V = const std::vector<Tensor>&;
  gradcheck([](V x) { return x[0].log_softmax(1); }, {r({3, 5})});
  gradcheck([](V x) { return x[0].log_softmax(0); }, {r({3, 5})});
  Tensor target = tensor(std::vector<int64_t>{4, 0, 2});
  gradcheck([&](V x) { return nll_loss(log_softmax(x[0], 1), target); }, {r({3, 5})});
  Tensor idx = tensor(std::vector<int64_t>{2, 0, 2, 1});
  gradcheck([&](V x) { return index_select(x[0], idx); }, {r({3, 2})});
  gradcheck([](V x) { return x[0].to(kFloat32).to(kFloat64) * 2.0; }, {r({4})}, 1e-3, 1e-3);
  gradcheck([](V x) { return x[0].clone() * x[0]; }, {r({4})});
}

TEST_CASE("leaves accumulate; non-leaves do not keep .grad; the graph is freed") {
  Tensor w = tensor({1.0, 2.0, 3.0}).set_requires_grad();
  Tensor y = (w * w).sum();  // dy/dw = 2w
  y.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  (w * 3.0).sum().backward();  // accumulates
  CHECK(w.grad().to_vector<double>() == std::vector<double>{5, 7, 9});
  // A leaf used twice gets both contributions.
  w.set_grad(Tensor());
  (w + w).sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 2, 2});
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("a second time"), Error);
  Tensor z = (w * 2.0).sum();
  z.backward(Tensor(), true);
  z.backward();  // retained once
  CHECK(w.grad().to_vector<double>() == std::vector<double>{6, 6, 6});
  CHECK(!y.is_leaf());
  CHECK(w.is_leaf());
}

TEST_CASE("the parts of a split add their gradients into one buffer, in any order, without touching shared ones") {
  using V = std::vector<double>;
  // x: [2, 6] split into three [2, 2] parts weighted 1, 2, 3 (the engine's in-place path, all parts used).
  Tensor x = arange(12, TensorOptions(kFloat64)).view({2, 6}).set_requires_grad();
  std::vector<Tensor> p = x.split(2, 1);
  (p[0] + p[1] * 2.0 + p[2] * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == V{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  // A part left unused gets zeros; a part used twice gets both contributions.
  x.set_grad(Tensor());
  p = x.split(2, 1);
  (p[0] * p[0] + p[2] + p[2]).sum().backward();
  CHECK(x.grad().to_vector<double>() == V{0, 2, 0, 0, 2, 2, 12, 14, 0, 0, 2, 2});
  // The input's gradient slot first receives a gradient that another tensor shares (the expanded ones
  // of sum's backward, passed on by add), then the narrow's: added into a copy, the shared one untouched.
  for (int order = 0; order < 2; ++order) {
    x.set_grad(Tensor());
    Tensor y = x * 2.0;
    Tensor loss = order ? (y.narrow(1, 0, 2) * 3.0).sum() + (y + 1.0).sum() : (y + 1.0).sum() + (y.narrow(1, 0, 2) * 3.0).sum();
    loss.backward(Tensor(), true);
    CHECK(x.grad().to_vector<double>() == V{8, 8, 2, 2, 2, 2, 8, 8, 2, 2, 2, 2});
    loss.backward();  // the retained graph gives the same again
    CHECK(x.grad().to_vector<double>() == V{16, 16, 4, 4, 4, 4, 16, 16, 4, 4, 4, 4});
  }
  // select and slice of a leaf, through the same path.
  Tensor w = arange(6, TensorOptions(kFloat64)).view({3, 2}).set_requires_grad();
  (w.select(0, 1) * 5.0 + w.slice(0, 0, 3, 2).sum(0)).sum().backward();
  CHECK(w.grad().to_vector<double>() == V{1, 1, 5, 5, 1, 1});
  gradcheck([](const std::vector<Tensor>& t) {
    auto q = t[0].split(3, -1);
    return q[0] * q[1] + q[2].narrow(0, 1, 1);
  }, {r({2, 9})});
}

TEST_CASE("unbind gives views without the dimension, whose gradients land in one buffer (timm's q, k, v)") {
  using V = std::vector<double>;
  // x: [2, 3] (0 1 2 / 3 4 5); unbind(1) -> three [2] columns sharing x's storage.
  Tensor x = arange(6, TensorOptions(kFloat64)).view({2, 3}).set_requires_grad();
  std::vector<Tensor> cols = x.unbind(1);
  REQUIRE(cols.size() == 3);
  CHECK(cols[2].shape() == Shape{2});
  CHECK(cols[2].to_vector<double>() == V{2, 5});
  CHECK(cols[0].data_ptr() == x.data_ptr());  // views of x's storage
  CHECK(cols[1].storage_offset() == 1);
  (cols[0] + cols[2] * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == V{1, 0, 3, 1, 0, 3});
  // Negative dims, the free function, and [3, B, H, T, D] -> three [B, H, T, D] as ViT's attention does.
  Tensor qkv = arange(24, TensorOptions(kFloat64)).view({3, 2, 1, 2, 2});
  std::vector<Tensor> parts = unbind(qkv, 0);
  REQUIRE(parts.size() == 3);
  CHECK(parts[1].shape() == Shape{2, 1, 2, 2});
  CHECK(parts[1].to_vector<double>() == V{8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(qkv.unbind(-1)[1].to_vector<double>() == qkv.select(4, 1).to_vector<double>());
  gradcheck([](const std::vector<Tensor>& t) {
    auto p = t[0].unbind(0);
    return p[0] * p[1] - p[2].exp();
  }, {r({3, 2, 2})});
  CHECK(testing::contains(testing::error_of([] { zeros({}).unbind(0); }), "unbind: expected a tensor with at least"));
  CHECK(testing::contains(testing::error_of([] { zeros({2, 3}).unbind(2); }), "unbind"));
}

TEST_CASE("an explicit output gradient; errors for bad backward calls") {
  Tensor x = tensor({1.0, 2.0}).set_requires_grad();
  Tensor y = x * 3.0;
  y.backward(tensor({1.0, 10.0}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 30});
  CHECK_THROWS_WITH_AS((x * 3.0).backward(), "backward: grad can be implicitly created only for one-element outputs, got shape [2]", Error);
  CHECK_THROWS_WITH_AS((x * 3.0).backward(tensor({1.0})), doctest::Contains("backward: gradient [1] float64"), Error);
  CHECK_THROWS_WITH_AS(tensor({1.0}).backward(), doctest::Contains("does not require grad"), Error);
  CHECK_THROWS_WITH_AS(arange(3).set_requires_grad(), doctest::Contains("only floating-point tensors"), Error);
  CHECK_THROWS_WITH_AS(y.set_requires_grad(false), doctest::Contains("leaf"), Error);
}

TEST_CASE("NoGradGuard and detach stop recording") {
  Tensor x = tensor({1.0, 2.0}).set_requires_grad();
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    CHECK(!y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK((x * 2.0).requires_grad());
  Tensor d = (x * 2.0).detach();
  CHECK(!d.requires_grad());
  CHECK(d.to_vector<double>() == std::vector<double>{2, 4});
}

TEST_CASE("post-accumulate hooks fire once per leaf after its gradient is complete; callbacks run at the end") {
  Tensor a = tensor({1.0, 2.0}).set_requires_grad();
  Tensor b = tensor({3.0}).set_requires_grad();
  std::vector<std::string> events;
  uint64_t ha = autograd::register_post_accumulate_grad_hook(a, [&](Tensor& t) {
    events.push_back("a:" + std::to_string(t.grad().to_vector<double>()[0]));
    autograd::queue_callback([&] { events.push_back("end"); });
  });
  autograd::register_post_accumulate_grad_hook(b, [&](Tensor& t) {
    events.push_back("b:" + std::to_string(t.grad().item<double>()));
  });
  // a is used twice: its hook must see the full gradient 1 + 3 = 4 for element 0.
  ((a * b).sum() + a.sum()).backward();
  REQUIRE(events.size() == 3);
  CHECK(events.back() == "end");
  CHECK(std::find(events.begin(), events.end(), "a:4.000000") != events.end());
  CHECK(std::find(events.begin(), events.end(), "b:3.000000") != events.end());
  autograd::remove_hook(a, ha);
  events.clear();
  a.set_grad(Tensor());
  a.sum().backward();
  CHECK(events.empty());
  CHECK_THROWS_WITH_AS(autograd::queue_callback([] {}), doctest::Contains("only valid while a backward pass runs"), Error);
}

TEST_CASE("Slice bounds take None (or std::nullopt) as LibTorch's do") {
  Tensor a = arange(6);
  CHECK(a.index({Slice(None, 2)}).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(a.index({Slice(4, None)}).to_vector<int64_t>() == std::vector<int64_t>{4, 5});
  CHECK(a.index({Slice(None, None, 2)}).to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4});
  CHECK(a.index({Slice(std::nullopt, -4)}).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  std::optional<int64_t> stop = 3;
  CHECK(a.index({Slice(1, stop)}).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
}

TEST_CASE("max and min along a dimension return values and indices, as torch.max(x, dim)") {
  Tensor a = tensor(std::vector<double>{3, 7, 7, 1, -2, 5}, {2, 3});
  auto [v, i] = max(a, 1);
  CHECK(v.to_vector<double>() == std::vector<double>{7, 5});
  CHECK(i.dtype() == kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 2});  // the first of equal maxima
  auto [lo, at] = a.min(0, /*keepdim=*/true);
  CHECK(lo.shape() == Shape{1, 3});
  CHECK(lo.to_vector<double>() == std::vector<double>{1, -2, 5});
  CHECK(at.shape() == Shape{1, 3});
  CHECK(at.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1});
}
