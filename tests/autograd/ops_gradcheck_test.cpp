// gradcheck (float64 central differences, tests/util/gradcheck.h) for every differentiable op in
// autograd/functions.h, each on contiguous inputs and again with every floating-point input handed to the
// op as a non-contiguous view of the same values: every other element of a larger tensor (at offset 1)
// and, where the last two dimensions allow, transposed storage. The views are made inside the checked
// function (stack + select, transpose + contiguous + transpose), so the finite differences perturb the
// contiguous leaves and the gradient flows back through the view.
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <vector>

#include "autograd/api.h"
#include "tests/util/gradcheck.h"

namespace {

using namespace lockstep;
using V = const std::vector<Tensor>&;
using Fn = std::function<Tensor(V)>;

Tensor r(const Shape& s) { return randn(s, kFloat64); }
Tensor positive(const Shape& s) { return rand(s, kFloat64) + 0.5; }  // [0.5, 1.5)
// Normal values at least 0.1 from 0, for ops with a kink there (abs, relu, sign, norm p=1).
Tensor away(const Shape& s) {
  Tensor x = r(s);
  return x + sign(x) * 0.1;
}
Tensor idx(const std::vector<int64_t>& v, const Shape& s = {}) { return tensor(v, s.empty() ? Shape{int64_t(v.size())} : s); }

enum class Layout { Contiguous, EveryOther, Transposed };

// x's values in `layout`, differentiable back to x.
Tensor relayout(const Tensor& x, Layout layout) {
  switch (layout) {
    case Layout::Contiguous: return x;
    case Layout::EveryOther: return stack({zeros_like(x), x}, -1).select(-1, 1);
    case Layout::Transposed: return x.transpose(-1, -2).contiguous().transpose(-1, -2);
  }
  return x;
}

bool transposable(const Tensor& x) { return x.dim() >= 2 && x.size(-1) > 1 && x.size(-2) > 1; }

// gradcheck of fn on `inputs` as given, then with every floating-point input relaid out.
void check(const char* what, const Fn& fn, const std::vector<Tensor>& inputs) {
  INFO(what);
  {
    INFO("contiguous inputs");
    testing::gradcheck(fn, inputs);
  }
  for (Layout layout : {Layout::EveryOther, Layout::Transposed}) {
    bool any = false;
    for (const Tensor& x : inputs) any |= layout == Layout::EveryOther ? x.numel() > 1 : transposable(x);
    if (!any) continue;
    const char* how = layout == Layout::EveryOther ? "inputs as every other element of a larger tensor"
                                                   : "inputs in transposed storage";
    INFO(how);
    auto strided = [&fn, layout](V in) {
      std::vector<Tensor> views;
      for (const Tensor& x : in) {
        const bool apply = layout == Layout::EveryOther ? x.numel() > 1 : transposable(x);
        views.push_back(apply ? relayout(x, layout) : x);
        if (apply) REQUIRE(!views.back().is_contiguous());
      }
      return fn(views);
    };
    testing::gradcheck(strided, inputs);
  }
}

}  // namespace

TEST_CASE("gradcheck: binary elementwise ops, with broadcasting") {
  manual_seed(10);
  check("add", [](V x) { return add(x[0], x[1]); }, {r({3, 4}), r({4})});
  check("sub", [](V x) { return sub(x[0], x[1]); }, {r({3, 1}), r({1, 4})});
  check("mul", [](V x) { return mul(x[0], x[1]); }, {r({2, 3, 4}), r({3, 1})});
  check("div", [](V x) { return div(x[0], x[1]); }, {r({3, 4}), positive({4})});
  check("add scalar", [](V x) { return add(x[0], 2.5); }, {r({3, 4})});
  check("mul scalar", [](V x) { return mul(x[0], -1.5); }, {r({3, 4})});
  check("rsub", [](V x) { return rsub(x[0], 2.0); }, {r({3, 4})});
  check("rdiv", [](V x) { return rdiv(x[0], 2.0); }, {positive({3, 4})});
  check("operators", [](V x) { return (x[0] + x[1]) * 2.0 - x[0] / 3.0 + 1.0 - x[1] * x[0] / x[2]; },
        {r({3, 4}), r({3, 4}), positive({4})});
  check("pow scalar 3", [](V x) { return pow(x[0], 3.0); }, {r({3, 4})});
  check("pow scalar -1.5", [](V x) { return pow(x[0], -1.5); }, {positive({3, 4})});
  check("pow scalar 0.5", [](V x) { return x[0].pow(0.5); }, {positive({3, 4})});
  check("pow tensor", [](V x) { return pow(x[0], x[1]); }, {positive({3, 4}), r({3, 4})});
  check("pow tensor broadcast", [](V x) { return pow(x[0], x[1]); }, {positive({2, 3}), r({3})});
  // maximum/minimum: operands drawn apart (a tie's gradient is split, and the difference is a kink).
  check("maximum", [](V x) { return maximum(x[0], x[1]); }, {r({3, 4}), r({4}) + 0.05});
  check("minimum", [](V x) { return minimum(x[0], x[1]); }, {r({3, 4}), r({3, 1}) - 0.05});
}

TEST_CASE("gradcheck: unary elementwise ops") {
  manual_seed(11);
  check("neg", [](V x) { return neg(x[0]); }, {r({3, 4})});
  check("abs", [](V x) { return abs(x[0]); }, {away({3, 4})});
  check("sign (gradient 0)", [](V x) { return sign(x[0]) * x[0]; }, {away({3, 4})});
  check("exp", [](V x) { return exp(x[0]); }, {r({3, 4})});
  check("log", [](V x) { return log(x[0]); }, {positive({3, 4})});
  check("sqrt", [](V x) { return sqrt(x[0]); }, {positive({3, 4})});
  check("rsqrt", [](V x) { return rsqrt(x[0]); }, {positive({3, 4})});
  check("square", [](V x) { return square(x[0]); }, {r({3, 4})});
  check("sin", [](V x) { return sin(x[0]); }, {r({3, 4})});
  check("cos", [](V x) { return cos(x[0]); }, {r({3, 4})});
  check("tanh", [](V x) { return tanh(x[0]); }, {r({3, 4})});
  check("sigmoid", [](V x) { return sigmoid(x[0]); }, {r({3, 4})});
  check("relu", [](V x) { return relu(x[0]); }, {away({3, 4})});
  check("silu", [](V x) { return silu(x[0]); }, {r({3, 4})});
  check("gelu", [](V x) { return gelu(x[0]); }, {r({3, 4})});
  check("gelu tanh", [](V x) { return gelu(x[0], "tanh"); }, {r({3, 4})});
  // clamp: values at least 0.05 from the bounds.
  Tensor c = tensor({-1.2, -0.7, -0.3, -0.1, 0.1, 0.2, 0.45, 0.8, 1.5, -0.55, 0.6, 0.0}, {3, 4});
  check("clamp", [](V x) { return clamp(x[0], -0.5, 0.5); }, {c});
  check("clamp min", [](V x) { return clamp(x[0], -0.25); }, {c});
  check("clamp max", [](V x) { return clamp(x[0], std::nullopt, 0.3); }, {c});
}

TEST_CASE("gradcheck: elementwise math") {
  manual_seed(12);
  Tensor unit = uniform({3, 4}, -0.8, 0.8, kFloat64);
  check("frac", [](V x) { return frac(x[0] * 3.0); }, {away({3, 4})});
  check("reciprocal", [](V x) { return reciprocal(x[0]); }, {positive({3, 4})});
  check("log1p", [](V x) { return log1p(x[0]); }, {positive({3, 4})});
  check("expm1", [](V x) { return expm1(x[0]); }, {r({3, 4})});
  check("log2", [](V x) { return log2(x[0]); }, {positive({3, 4})});
  check("log10", [](V x) { return log10(x[0]); }, {positive({3, 4})});
  check("erf", [](V x) { return erf(x[0]); }, {r({3, 4})});
  check("erfc", [](V x) { return erfc(x[0]); }, {r({3, 4})});
  check("erfinv", [](V x) { return erfinv(x[0]); }, {unit});
  check("tan", [](V x) { return tan(x[0]); }, {unit});
  check("asin", [](V x) { return asin(x[0]); }, {unit});
  check("acos", [](V x) { return acos(x[0]); }, {unit});
  check("atan", [](V x) { return atan(x[0]); }, {r({3, 4})});
  check("sinh", [](V x) { return sinh(x[0]); }, {r({3, 4})});
  check("cosh", [](V x) { return cosh(x[0]); }, {r({3, 4})});
  check("atan2", [](V x) { return atan2(x[0], x[1]); }, {r({3, 4}), away({4})});
  check("fmod", [](V x) { return fmod(x[0], x[1]); }, {r({3, 4}), away({4})});
  check("remainder", [](V x) { return remainder(x[0], x[1]); }, {r({3, 4}), away({4})});
}

TEST_CASE("gradcheck: activations") {
  manual_seed(13);
  V a = {away({3, 4}) * 2.0};
  check("elu", [](V x) { return elu(x[0], 0.7); }, a);
  check("selu", [](V x) { return selu(x[0]); }, a);
  check("celu", [](V x) { return celu(x[0], 1.5); }, a);
  check("softplus", [](V x) { return softplus(x[0], 2.0, 1.0); }, a);
  check("hardtanh", [](V x) { return hardtanh(x[0], -0.5, 0.8); }, a);
  check("hardshrink", [](V x) { return hardshrink(x[0], 0.05); }, a);
  check("softshrink", [](V x) { return softshrink(x[0], 0.05); }, a);
  check("threshold", [](V x) { return threshold(x[0], 0.05, 2.0); }, a);
  check("leaky_relu", [](V x) { return leaky_relu(x[0], 0.2); }, a);
  check("hardsigmoid", [](V x) { return hardsigmoid(x[0]); }, a);
  check("hardswish", [](V x) { return hardswish(x[0]); }, a);
  check("mish", [](V x) { return mish(x[0]); }, a);
  check("logsigmoid", [](V x) { return logsigmoid(x[0]); }, a);
  check("softsign", [](V x) { return softsign(x[0]); }, a);
  check("tanhshrink", [](V x) { return tanhshrink(x[0]); }, a);
  check("glu", [](V x) { return glu(x[0], 1); }, {r({3, 4})});
  check("prelu", [](V x) { return prelu(x[0], x[1]); }, {away({2, 3, 4}), r({3})});
  check("softmin", [](V x) { return softmin(x[0], 1); }, {r({3, 4})});
}

TEST_CASE("gradcheck: where, masked_fill, tril and triu") {
  manual_seed(12);
  const Tensor cond = rand({3, 4}) < 0.5, row = rand({4}) < 0.5;
  check("where", [&](V x) { return where(cond, x[0], x[1]); }, {r({3, 4}), r({4})});
  check("where broadcast cond", [&](V x) { return where(row, x[0], x[1]); }, {r({3, 4}), r({3, 1})});
  check("where scalar", [&](V x) { return where(cond, x[0], 0.5); }, {r({3, 4})});
  const Tensor causal = tril(ones({3, 3})) == 0.0;
  check("masked_fill", [&](V x) { return masked_fill(x[0], causal, -2.0); }, {r({2, 3, 3})});
  check("masked_fill -inf then softmax",
        [&](V x) { return softmax(masked_fill(x[0], causal, -std::numeric_limits<double>::infinity()), -1); },
        {r({2, 3, 3})});
  check("tril", [](V x) { return tril(x[0], -1); }, {r({4, 5})});
  check("tril batched", [](V x) { return tril(x[0], 1); }, {r({2, 3, 4})});
  check("triu", [](V x) { return triu(x[0], 2); }, {r({4, 5})});
  check("triu batched", [](V x) { return triu(x[0]); }, {r({2, 4, 3})});
}

TEST_CASE("gradcheck: views and reshapes") {
  manual_seed(13);
  check("reshape", [](V x) { return reshape(x[0], {4, -1}); }, {r({2, 3, 4})});
  // view needs a viewable layout, so its non-contiguous inputs go through reshape (a copy) first.
  testing::gradcheck([](V x) { return view(x[0], {6, 4}); }, {r({2, 3, 4})});
  check("view after reshape", [](V x) { return view(reshape(x[0], {2, 12}), {6, 4}); }, {r({2, 3, 4})});
  check("transpose 2-D", [](V x) { return transpose(x[0]); }, {r({3, 4})});
  check("transpose", [](V x) { return transpose(x[0], 0, 2); }, {r({2, 3, 4})});
  check("permute", [](V x) { return permute(x[0], {2, 0, 1}); }, {r({2, 3, 4})});
  check("expand", [](V x) { return expand(x[0], {2, 3, 4}); }, {r({3, 1})});
  check("slice with step", [](V x) { return slice(x[0], 1, 1, 5, 2); }, {r({3, 6})});
  check("narrow", [](V x) { return narrow(x[0], 0, 1, 2); }, {r({4, 3})});
  check("select", [](V x) { return select(x[0], 1, -1); }, {r({2, 3, 4})});
  check("unsqueeze", [](V x) { return unsqueeze(x[0], 1); }, {r({3, 4})});
  check("squeeze dim", [](V x) { return squeeze(x[0], 1); }, {r({3, 1, 4})});
  check("squeeze", [](V x) { return squeeze(x[0]); }, {r({1, 3, 1, 4})});
  check("contiguous", [](V x) { return contiguous(x[0].t()); }, {r({3, 4})});
  check("flatten", [](V x) { return flatten(x[0], 1); }, {r({2, 3, 4})});
  check("unflatten", [](V x) { return x[0].unflatten(1, {3, 4}); }, {r({2, 12})});
  check("index", [](V x) { return x[0].index({Slice(), -1, Slice(std::nullopt, std::nullopt, 2)}); }, {r({2, 3, 5})});
  check("as_strided, overlapping windows", [](V x) { return as_strided(x[0], {3, 3}, {2, 1}, 1); }, {r({3, 4})});
  check("unfold", [](V x) { return unfold(x[0], 1, 3, 2); }, {r({2, 7})});
  check("unfold overlapping", [](V x) { return x[0].unfold(0, 2, 1); }, {r({4, 3})});
  check("index with None and Ellipsis", [](V x) { return x[0].index({None, Ellipsis, Slice(1, 3)}); }, {r({2, 4})});
}

TEST_CASE("gradcheck: cat, stack, split and chunk") {
  manual_seed(14);
  check("cat", [](V x) { return cat({x[0], x[1], x[2]}, 1); }, {r({2, 1}), r({2, 3}), r({2, 2})});
  check("cat dim 0", [](V x) { return cat({x[0], x[1]}); }, {r({2, 3}), r({4, 3})});
  check("stack", [](V x) { return stack({x[0], x[1]}, 1); }, {r({3, 4}), r({3, 4})});
  // split/chunk return several tensors: all of them are weighted and summed through cat.
  check("split size", [](V x) { return cat(split(x[0], 2, 0), 1); }, {r({6, 3})});
  check("split sizes", [](V x) {
    std::vector<Tensor> parts = split(x[0], std::vector<int64_t>{1, 2, 3}, 1);
    return parts[0] * 2.0 + parts[1].sum(1, true) * parts[2];
  }, {r({3, 6})});
  check("chunk", [](V x) {
    std::vector<Tensor> parts = chunk(x[0], 3, 1);
    return parts[0] * parts[1] + parts[2].sum(1, true);
  }, {r({2, 7})});
}

TEST_CASE("gradcheck: indexing, sort and topk") {
  manual_seed(15);
  const Tensor rows = idx({2, 0, 2, 1});
  check("index_select", [&](V x) { return index_select(x[0], 0, rows); }, {r({4, 3})});
  check("index_select dim 0", [&](V x) { return index_select(x[0], rows); }, {r({3, 2})});
  check("index_select dim 1", [](V x) { return index_select(x[0], 1, idx({4, 0, 4})); }, {r({2, 5})});
  check("gather", [](V x) { return gather(x[0], 1, idx({3, 0, 0, 1, 2, 2}, {3, 2})); }, {r({3, 4})});
  check("scatter_add", [](V x) { return scatter_add(x[0], 1, idx({4, 4, 0, 1, 2, 1}, {3, 2}), x[1]); },
        {r({3, 5}), r({3, 2})});
  check("index_add", [](V x) { return index_add(x[0], 0, idx({4, 0, 4, 2}), x[1]); }, {r({5, 3}), r({4, 3})});
  check("index_add dim 1", [](V x) { return index_add(x[0], 1, idx({1, 1, 3}), x[1]); }, {r({2, 4}), r({2, 3})});
  check("tensor index", [](V x) { return x[0].index({idx({2, 0, 2})}); }, {r({4, 3})});
  check("sort values", [](V x) { return sort(x[0], -1).first; }, {r({3, 5})});
  check("sort descending", [](V x) { return sort(x[0], 0, true).first; }, {r({4, 3})});
  check("topk values", [](V x) { return topk(x[0], 2).first; }, {r({3, 6})});
  check("topk smallest", [](V x) { return topk(x[0], 2, 0, false).first; }, {r({4, 3})});
}

TEST_CASE("gradcheck: reductions") {
  manual_seed(16);
  check("sum", [](V x) { return sum(x[0]); }, {r({2, 3, 4})});
  check("sum dim", [](V x) { return sum(x[0], 1); }, {r({2, 3, 4})});
  check("sum dims keepdim", [](V x) { return sum(x[0], {0, 2}, true); }, {r({2, 3, 4})});
  check("mean", [](V x) { return mean(x[0]); }, {r({2, 3, 4})});
  check("mean dim", [](V x) { return mean(x[0], -1, true); }, {r({2, 3, 4})});
  check("mean dims", [](V x) { return mean(x[0], {0, 2}); }, {r({2, 3, 4})});
  check("var", [](V x) { return var(x[0]); }, {r({3, 4})});
  check("var biased dims", [](V x) { return var(x[0], {0, 2}, false, true); }, {r({2, 3, 4})});
  check("std", [](V x) { return lockstep::std(x[0], std::vector<int64_t>{1}); }, {r({3, 4})});
  check("std biased", [](V x) { return lockstep::std(x[0], {}, false); }, {r({3, 4})});
  check("max", [](V x) { return max(x[0]); }, {r({3, 4})});
  check("min", [](V x) { return min(x[0]); }, {r({3, 4})});
  check("max dim", [](V x) { return std::get<0>(max(x[0], 1)); }, {r({2, 3, 4})});
  check("min dim keepdim", [](V x) { return std::get<0>(min(x[0], 0, true)); }, {r({3, 4})});
  check("amax", [](V x) { return amax(x[0], {0, 2}); }, {r({2, 3, 4})});
  check("amin", [](V x) { return amin(x[0], std::vector<int64_t>{1}, true); }, {r({3, 4})});
  check("logsumexp", [](V x) { return logsumexp(x[0], {0, 2}, true); }, {r({2, 3, 4})});
  check("norm p=1", [](V x) { return norm(x[0], 1); }, {away({3, 4})});
  check("norm p=2 dims", [](V x) { return norm(x[0], 2, {0, 2}); }, {r({2, 3, 4})});
  check("norm p=3", [](V x) { return norm(x[0], 3, std::vector<int64_t>{1}); }, {r({3, 4})});
  check("norm p=inf",
        [](V x) { return norm(x[0], std::numeric_limits<double>::infinity(), std::vector<int64_t>{0}, true); },
        {r({3, 4})});
  check("softmax dim 0", [](V x) { return softmax(x[0], 0); }, {r({3, 4})});
  check("softmax dim 1 of 3", [](V x) { return softmax(x[0], 1); }, {r({2, 3, 4})});
  check("log_softmax dim 0", [](V x) { return log_softmax(x[0], 0); }, {r({3, 4})});
  check("log_softmax last", [](V x) { return log_softmax(x[0], -1); }, {r({2, 3, 4})});
}

TEST_CASE("gradcheck: scans, cumprod through zeros") {
  manual_seed(19);
  check("cumsum", [](V x) { return cumsum(x[0], 1); }, {r({2, 3, 4})});
  check("cumsum last", [](V x) { return cumsum(x[0], -1); }, {r({3, 5})});
  check("cumsum to float64 from float32 values", [](V x) { return cumsum(x[0], 0, kFloat64); }, {r({4, 3})});
  check("cumprod", [](V x) { return cumprod(x[0], 1); }, {r({2, 3, 4})});
  check("cumprod dim 0", [](V x) { return cumprod(x[0], 0); }, {r({4, 3})});
  // cumprod is linear in each element, so central differences are exact at a zero too: one zero, two,
  // a zero first and last, and a column of zeros.
  const Tensor zeros_in = tensor(std::vector<double>{0.5, 0.0, -2.0, 0.8, 1.2, 0.0, 1.5, -2.0, 0.8, 1.2,  //
                                                     0.5, 1.5, 0.0, 0.8, 0.0, 0.0, 1.5, 0.7, 0.8, 0.0},
                                 {4, 5});
  check("cumprod with zeros, last dim", [](V x) { return cumprod(x[0], -1); }, {zeros_in});
  check("cumprod with zeros, dim 0", [](V x) { return cumprod(x[0], 0); }, {zeros_in});
  check("logcumsumexp", [](V x) { return logcumsumexp(x[0], 1); }, {r({2, 3, 4})});
  check("logcumsumexp dim 0", [](V x) { return logcumsumexp(x[0], 0); }, {r({4, 3}) * 5.0});
  check("cummax", [](V x) { return std::get<0>(cummax(x[0], 1)); }, {r({2, 3, 4})});
  check("cummin last", [](V x) { return std::get<0>(cummin(x[0], -1)); }, {r({3, 5})});
}

TEST_CASE("gradcheck: matmul in every rank combination, linear and nll_loss") {
  manual_seed(17);
  auto mm = [](V x) { return matmul(x[0], x[1]); };
  check("matmul 1-D 1-D", mm, {r({4}), r({4})});
  check("matmul 1-D 2-D", mm, {r({3}), r({3, 4})});
  check("matmul 2-D 1-D", mm, {r({3, 4}), r({4})});
  check("matmul 2-D 2-D", mm, {r({3, 4}), r({4, 2})});
  check("matmul 1-D 3-D", mm, {r({3}), r({2, 3, 4})});
  check("matmul 3-D 1-D", mm, {r({2, 3, 4}), r({4})});
  check("matmul [B,T,C] @ [C,D]", mm, {r({2, 3, 4}), r({4, 5})});
  check("matmul [T,C] @ [B,C,D]", mm, {r({3, 4}), r({2, 4, 5})});
  check("matmul [B,H,T,D] @ [B,H,D,T]", mm, {r({2, 2, 3, 4}), r({2, 2, 4, 3})});
  check("matmul broadcast batch", mm, {r({2, 1, 3, 4}), r({5, 4, 2})});
  check("matmul transposed operands", [](V x) { return matmul(x[0].t(), x[1].t()); }, {r({4, 3}), r({2, 4})});
  check("matmul q @ k^T", [](V x) { return matmul(x[0], x[1].transpose(-2, -1)); }, {r({2, 2, 3, 4}), r({2, 2, 3, 4})});
  check("linear", [](V x) { return linear(x[0], x[1], x[2]); }, {r({2, 3, 4}), r({5, 4}), r({5})});
  check("linear without bias", [](V x) { return linear(x[0], x[1]); }, {r({2, 3, 4}), r({5, 4})});
  check("linear 1-D input", [](V x) { return linear(x[0], x[1], x[2]); }, {r({4}), r({5, 4}), r({5})});
  const Tensor target = idx({4, 0, 2, 2});
  check("nll_loss", [&](V x) { return nll_loss(x[0], target); }, {r({4, 5})});
  check("cross entropy", [&](V x) { return nll_loss(log_softmax(x[0], 1), target); }, {r({4, 5})});
}

TEST_CASE("gradcheck: compositions (flip, roll, repeat, meshgrid, cross, bmm, addmm, lerp) and einsum") {
  manual_seed(20);
  check("flip", [](V x) { return flip(x[0], {0, -1}); }, {r({3, 4})});
  check("roll", [](V x) { return roll(x[0], {2, -1}, {0, 1}); }, {r({3, 4})});
  check("roll flattened", [](V x) { return x[0].roll(5); }, {r({3, 4})});
  check("repeat", [](V x) { return repeat(x[0], {2, 1, 3}); }, {r({2, 3})});
  check("repeat_interleave", [](V x) { return repeat_interleave(x[0], 2, -1); }, {r({2, 3})});
  check("repeat_interleave counts", [](V x) { return x[0].repeat_interleave(idx({0, 3, 1}), 1); }, {r({2, 3})});
  check("meshgrid", [](V x) {
    auto g = meshgrid({x[0], x[1]}, "xy");
    return g[0] * 2.0 + g[1] * g[1];
  }, {r({3}), r({4})});
  check("outer", [](V x) { return outer(x[0], x[1]); }, {r({3}), r({4})});
  check("cross", [](V x) { return cross(x[0], x[1], -1); }, {r({2, 1, 3}), r({1, 4, 3})});
  check("bmm", [](V x) { return bmm(x[0], x[1]); }, {r({2, 3, 4}), r({2, 4, 5})});
  check("addmm", [](V x) { return addmm(x[0], x[1], x[2], 0.5, -2.0); }, {r({3}), r({2, 4}), r({4, 3})});
  check("baddbmm", [](V x) { return baddbmm(x[0], x[1], x[2], 2.0, 0.5); }, {r({3, 1}), r({2, 3, 4}), r({2, 4, 5})});
  check("lerp small weight", [](V x) { return lerp(x[0], x[1], 0.3); }, {r({3, 4}), r({4})});
  check("lerp large weight", [](V x) { return lerp(x[0], x[1], 0.7); }, {r({3, 4}), r({3, 4})});
  // Weights on both sides of 0.5, where lerp changes form (the same function either way).
  check("lerp tensor weight", [](V x) { return lerp(x[0], x[1], x[2]); },
        {r({3, 4}), r({3, 4}), rand({4}, kFloat64) * 1.6 - 0.3});
  const std::vector<std::pair<std::string, std::vector<Shape>>> einsums = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"ii->i", {{4, 4}}},
      {"ii", {{4, 4}}},
      {"i,i->", {{5}, {5}}},
      {"ij->ji", {{3, 4}}},
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}}},
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"iji->j", {{3, 4, 3}}},
      {"ij,jk,kl->il", {{2, 3}, {3, 1}, {4, 2}}},
  };
  for (const auto& [equation, shapes] : einsums) {
    std::vector<Tensor> inputs;
    for (const Shape& s : shapes) inputs.push_back(r(s));
    check(("einsum " + equation).c_str(), [eq = equation](V x) { return einsum(eq, x); }, inputs);
  }
  // beta 0: the input is ignored, NaNs included, as PyTorch's.
  const Tensor m1 = r({2, 4}), m2 = r({4, 3});
  CHECK(allclose(addmm(full({2, 3}, std::numeric_limits<double>::quiet_NaN(), kFloat64), m1, m2, 0.0), matmul(m1, m2)));
}

TEST_CASE("gradcheck: conversions, clone and dropout") {
  manual_seed(18);
  check("clone", [](V x) { return clone(x[0]) * x[0]; }, {r({3, 4})});
  check("to device", [](V x) { return to(x[0], Device::cpu()) * 2.0; }, {r({3, 4})});
  // Through float32: the finite difference sees float32 rounding, hence the looser tolerance.
  testing::gradcheck([](V x) { return to(to(x[0], kFloat32), kFloat64) * 2.0; }, {r({3, 4})}, 1e-3, 1e-3);
  // dropout with the generator reseeded on every call, so every evaluation draws the same mask.
  check("dropout", [](V x) {
    manual_seed(5);
    return dropout(x[0], 0.4);
  }, {r({4, 5})});
  check("dropout in eval", [](V x) { return dropout(x[0], 0.4, false); }, {r({4, 5})});
}
