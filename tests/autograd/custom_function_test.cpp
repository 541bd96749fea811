// Custom autograd functions (autograd/function.h) and autograd::grad / backward(inputs): values,
// gradients against the built-in ops and finite differences, several outputs, and the errors.
#include <doctest/doctest.h>

#include "autograd/api.h"
#include "autograd/function.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::contains;
using lockstep::testing::error_of;
using lockstep::testing::gradcheck;

namespace {

// pytorch/examples' cpp/autograd LinearFunction, as written there.
struct LinearFunction : Function<LinearFunction> {
  static Tensor forward(AutogradContext* ctx, Tensor input, Tensor weight, Tensor bias = Tensor()) {
    ctx->save_for_backward({input, weight, bias});
    Tensor output = input.mm(weight.t());
    if (bias.defined()) output += bias.unsqueeze(0).expand_as(output);
    return output;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    Tensor input = saved[0], weight = saved[1], bias = saved[2];
    Tensor g = grad_outputs[0];
    return {g.mm(weight), g.t().mm(input), bias.defined() ? g.sum(0) : Tensor()};
  }
};

struct MulConstant : Function<MulConstant> {
  static Tensor forward(AutogradContext* ctx, Tensor x, double c) {
    ctx->saved_data["c"] = c;
    return x * c;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) { return {g[0] * ctx->saved_data["c"].toDouble(), Tensor()}; }
};

// Saves its own output: exp's gradient is g * exp(x).
struct Exp : Function<Exp> {
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    Tensor y = exp(x);
    ctx->save_for_backward({y});
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) { return {g[0] * ctx->get_saved_variables()[0]}; }
};

// Two outputs, and a record of what backward received.
struct Split : Function<Split> {
  static inline tensor_list received;
  static tensor_list forward(AutogradContext* ctx, Tensor x, bool materialize) {
    ctx->set_materialize_grads(materialize);
    return {x * 2.0, x * 3.0};
  }
  static tensor_list backward(AutogradContext*, tensor_list g) {
    received = g;
    Tensor gx;
    if (g[0].defined()) gx = g[0] * 2.0;
    if (g[1].defined()) gx = gx.defined() ? gx + g[1] * 3.0 : g[1] * 3.0;
    return {gx, Tensor()};
  }
};

// A list argument counts one gradient per tensor; an index output is not differentiable.
struct SumAndArgmax : Function<SumAndArgmax> {
  static tensor_list forward(AutogradContext* ctx, std::vector<Tensor> xs) {
    Tensor s = xs[0] + xs[1];
    Tensor idx = s.argmax(0);
    ctx->mark_non_differentiable({idx});
    return {s, idx};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    CHECK(ctx->needs_input_grad(0));
    CHECK_FALSE(ctx->needs_input_grad(1));
    return {g[0], g[0]};
  }
};

// Misbehaving backwards, for the errors.
struct TooFew : Function<TooFew> {
  static Tensor forward(AutogradContext*, Tensor x, Tensor y) { return x + y; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0]}; }
};
struct WrongShape : Function<WrongShape> {
  static Tensor forward(AutogradContext*, Tensor x) { return x * 1.0; }
  static tensor_list backward(AutogradContext*, tensor_list) { return {ones({7})}; }
};
struct GradForScalar : Function<GradForScalar> {
  static Tensor forward(AutogradContext*, Tensor x, double) { return x * 1.0; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0], g[0]}; }
};
// Returns a [1, n] gradient for a [n] input (sums) and a gradient of the right count of elements.
struct Broadcasting : Function<Broadcasting> {
  static Tensor forward(AutogradContext*, Tensor x, Tensor y) { return x.sum() + y.sum(); }
  static tensor_list backward(AutogradContext*, tensor_list g) {
    return {g[0].expand({3, 4}), g[0].expand({6})};  // x is [4]: summed over the rows; y is [2, 3]: reshaped
  }
};

}  // namespace

TEST_CASE("custom Function: pytorch/examples' LinearFunction matches linear, with and without bias") {
  manual_seed(3);
  Tensor x = randn({2, 3}, kFloat64).requires_grad_(), w = randn({4, 3}, kFloat64).requires_grad_();
  Tensor b = randn({4}, kFloat64).requires_grad_();
  Tensor y = LinearFunction::apply(x, w, b);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "(anonymous namespace)::LinearFunctionBackward");
  Tensor ref = linear(x.detach(), w.detach(), b.detach());
  CHECK(allclose(y.detach(), ref, 1e-12, 1e-12));
  (y * y).sum().backward();
  Tensor gx = x.grad(), gw = w.grad(), gb = b.grad();
  x.set_grad({}), w.set_grad({}), b.set_grad({});
  Tensor y2 = linear(x, w, b);
  (y2 * y2).sum().backward();
  CHECK(allclose(gx, x.grad(), 1e-12, 1e-12));
  CHECK(allclose(gw, w.grad(), 1e-12, 1e-12));
  CHECK(allclose(gb, b.grad(), 1e-12, 1e-12));

  using V = const std::vector<Tensor>&;
  gradcheck([](V v) { return LinearFunction::apply(v[0], v[1]); }, {randn({2, 3}, kFloat64), randn({4, 3}, kFloat64)});
  gradcheck([](V v) { return LinearFunction::apply(v[0], v[1], v[2]); },
            {randn({2, 3}, kFloat64), randn({4, 3}, kFloat64), randn({4}, kFloat64)});
}

TEST_CASE("custom Function: saved_data, a saved output, retain_graph") {
  Tensor x = tensor({1.0, -2.0}).requires_grad_();
  Tensor y = MulConstant::apply(x, 5.5);
  CHECK(y.to_vector<double>() == std::vector<double>{5.5, -11.0});
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5.5, 5.5});

  using V = const std::vector<Tensor>&;
  gradcheck([](V v) { return Exp::apply(v[0]); }, {randn({3, 2}, kFloat64)});
  Tensor z = Exp::apply(x);
  Tensor loss = z.sum();
  loss.backward({}, /*retain_graph=*/true);
  loss.backward();  // the second pass still has the saved output
  CHECK(std::abs(x.grad().to_vector<double>()[0] - (5.5 + 2 * std::exp(1.0))) < 1e-12);
  CHECK(contains(error_of([&] { loss.backward(); }), "a second time"));

  // Without any input requiring grad, or under NoGradGuard, nothing is recorded.
  CHECK_FALSE(MulConstant::apply(tensor({1.0}), 2.0).requires_grad());
  NoGradGuard no_grad;
  CHECK_FALSE(MulConstant::apply(x, 2.0).requires_grad());
}

TEST_CASE("custom Function: several outputs, materialized or undefined gradients, non-differentiable outputs") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  auto outs = Split::apply(x, true);
  REQUIRE(outs.size() == 2);
  CHECK(outs[1].to_vector<double>() == std::vector<double>{3.0, 6.0});
  (outs[0].sum() + outs[1].sum() * 2.0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8.0, 8.0});

  // Only the second output used: the first one's gradient arrives as zeros...
  x.set_grad({});
  Split::apply(x, true)[1].sum().backward();
  REQUIRE(Split::received.size() == 2);
  CHECK(Split::received[0].to_vector<double>() == std::vector<double>{0.0, 0.0});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 3.0});
  // ... or undefined with set_materialize_grads(false).
  x.set_grad({});
  Split::apply(x, false)[1].sum().backward();
  CHECK_FALSE(Split::received[0].defined());
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 3.0});

  Tensor a = tensor({1.0, 5.0, 2.0}).requires_grad_(), b = tensor({0.0, 1.0, 0.0});
  auto sa = SumAndArgmax::apply(std::vector<Tensor>{a, b});
  CHECK_FALSE(sa[1].requires_grad());
  CHECK(sa[1].item<int64_t>() == 1);
  CHECK(sa[0].requires_grad());
  sa[0].sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1.0, 1.0, 1.0});
}

TEST_CASE("custom Function: gradients checked against forward's arguments") {
  Tensor x = ones({3}).requires_grad_(), y = ones({3}).requires_grad_();
  CHECK(contains(error_of([&] { TooFew::apply(x, y).sum().backward(); }), "backward returned 1 gradients; expected 2"));
  std::string e = error_of([&] { WrongShape::apply(x).sum().backward(); });
  CHECK(contains(e, "WrongShapeBackward"));
  CHECK(contains(e, "invalid gradient at position 0: got [7]"));
  CHECK(contains(error_of([&] { GradForScalar::apply(x, 1.0).sum().backward(); }), "argument of forward is not a tensor"));
  Tensor p = ones({4}).requires_grad_(), q = ones({2, 3}).requires_grad_();
  Broadcasting::apply(p, q).backward();
  CHECK(p.grad().to_vector<float>() == std::vector<float>{3, 3, 3, 3});
  CHECK(q.grad().shape() == Shape{2, 3});

  IValue v = 2.5;
  CHECK(contains(error_of([&] { v.toInt(); }), "IValue::toInt: the value holds double"));
  CHECK(IValue(int64_t{3}).toInt() == 3);
  CHECK(IValue("s").toStringRef() == "s");
  CHECK(IValue().isNone());
}

TEST_CASE("autograd::grad returns gradients without accumulating; backward with inputs accumulates only there") {
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_(), w = tensor({2.0, 2.0, 2.0}).requires_grad_();
  Tensor h = x * w;  // a non-leaf input
  Tensor y = (h * h).sum();
  auto g = grad({y}, {x, h}, {}, /*retain_graph=*/true);
  CHECK(g[0].to_vector<double>() == std::vector<double>{8.0, 16.0, 24.0});  // 2 h w
  CHECK(g[1].to_vector<double>() == std::vector<double>{4.0, 8.0, 12.0});   // 2 h
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());

  // A weighted output, and an unused input.
  Tensor u = ones({1}).requires_grad_();
  auto g2 = grad({h}, {x, u}, {tensor({1.0, 0.0, -1.0})}, true, false, /*allow_unused=*/true);
  CHECK(g2[0].to_vector<double>() == std::vector<double>{2.0, 0.0, -2.0});
  CHECK_FALSE(g2[1].defined());
  CHECK(contains(error_of([&] { grad({y}, {u}, {}, true); }), "input 0 (shape [1]) appears not to have been used"));
  CHECK(contains(error_of([&] { grad({y}, {tensor({1.0})}); }), "input 0 (shape [1]) does not require grad"));
  CHECK(contains(error_of([&] { grad({y}, {x}, {}, true, /*create_graph=*/true); }), "create_graph"));

  // Two roots in one pass, accumulating into w alone.
  backward({y, h.sum()}, {}, true, false, {w});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{5.0, 18.0, 39.0});  // 2 h x + x
  CHECK_FALSE(x.grad().defined());
  backward({y});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8.0, 16.0, 24.0});
}
