// Every op against PyTorch: tests/fixtures/op_fixtures.safetensors (written by tools/fixtures/make_op_fixtures.py) holds,
// per case, PyTorch's inputs, outputs and the gradients of sum(out * w) for a fixed random w. Each case is
// run here twice: on the fixture's contiguous inputs, and on non-contiguous views holding the same values
// (transposed storage, or every other element of a larger buffer at an offset). Both runs must match
// PyTorch to 1e-10 relative, and each other to 1e-14. A fixture case with no C++ counterpart fails.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "tensor/safetensors.h"

namespace {

using namespace lockstep;

constexpr const char* kFixtures = "tests/fixtures/op_fixtures.safetensors";
constexpr double kInf = std::numeric_limits<double>::infinity();

// One PyTorch case: weights[k] and grads[k] are undefined where PyTorch has none (integer outputs and
// inputs, non-differentiable ops).
struct Fixture {
  std::string expr;  // the PyTorch expression, inputs named a, b, c, d
  std::vector<Tensor> inputs, outs, weights, grads;
};

void put(std::vector<Tensor>& v, size_t k, const Tensor& t) {
  if (v.size() <= k) v.resize(k + 1);
  v[k] = t;
}

// The fixture cases by name; the ones other suites own (attention_test's "attention") are left out.
const std::map<std::string, Fixture>& fixtures() {
  static const std::map<std::string, Fixture> all = [] {
    SafetensorsFile file = load_safetensors(kFixtures);
    std::map<std::string, Fixture> cases;
    for (auto& [key, value] : file.tensors) {
      const size_t slash = key.find('/');
      const std::string name = key.substr(0, slash), part = key.substr(slash + 1);
      if (name == "attention") continue;
      Tensor t = file.metadata.count(key) && file.metadata.at(key) == "bool" ? value.to(kBool) : value;
      Fixture& f = cases[name];
      auto number = [&](size_t prefix) { return part.size() > prefix ? std::stoul(part.substr(prefix)) : 0; };
      if (part.rfind("in", 0) == 0) put(f.inputs, number(2), t);
      else if (part.rfind("out", 0) == 0) put(f.outs, number(3), t);
      else if (part.rfind("w", 0) == 0) put(f.weights, number(1), t);
      else if (part.rfind("grad", 0) == 0) put(f.grads, number(4), t);
      else fail("unknown fixture key ", key);
    }
    for (auto& [name, f] : cases) {
      f.expr = file.metadata.at(name);
      f.weights.resize(f.outs.size());
      f.grads.resize(f.inputs.size());
    }
    return cases;
  }();
  return all;
}

// What an op returns, as a list.
using Outputs = std::vector<Tensor>;
Outputs outputs(const Tensor& t) { return {t}; }
Outputs outputs(const std::pair<Tensor, Tensor>& p) { return {p.first, p.second}; }
Outputs outputs(const std::vector<Tensor>& v) { return v; }
Outputs outputs(const std::tuple<Tensor, Tensor>& t) { return {std::get<0>(t), std::get<1>(t)}; }
Tensor arg(const std::vector<Tensor>& x, size_t k) { return k < x.size() ? x[k] : Tensor(); }

// One way to compute a fixture case with lockstep (a case may have several: function, method, operator).
struct Impl {
  std::string name;  // the fixture case
  std::string call;  // the C++ expression, for messages
  std::function<Outputs(const std::vector<Tensor>&)> fn;
  bool needs_contiguous = false;  // `view`: on non-contiguous inputs it must throw, as PyTorch's does
};

// IMPL(case, expression over a, b, c, d)
#define IMPL(name, ...)                                                                  \
  Impl {                                                                                 \
    name, #__VA_ARGS__, [](const std::vector<Tensor>& x) -> Outputs {                    \
      [[maybe_unused]] const Tensor a = arg(x, 0), b = arg(x, 1), c = arg(x, 2), d = arg(x, 3); \
      return outputs(__VA_ARGS__);                                                       \
    }                                                                                    \
  }

std::vector<Impl> elementwise_impls() {
  return {
      IMPL("add", add(a, b)),
      IMPL("add", a + b),
      IMPL("add_bcast_both", add(a, b)),
      IMPL("sub", sub(a, b)),
      IMPL("sub", a - b),
      IMPL("mul", mul(a, b)),
      IMPL("mul", a * b),
      IMPL("div", div(a, b)),
      IMPL("div", a / b),
      IMPL("add_scalar_2.5", add(a, 2.5)),
      IMPL("add_scalar_2.5", a + 2.5),
      IMPL("add_scalar_2.5", 2.5 + a),
      IMPL("sub_scalar_1.25", a - 1.25),
      IMPL("mul_scalar_-1.5", mul(a, -1.5)),
      IMPL("mul_scalar_-1.5", a * -1.5),
      IMPL("mul_scalar_-1.5", -1.5 * a),
      IMPL("div_scalar_4", a / 4.0),
      IMPL("rsub_2.5", rsub(a, 2.5)),
      IMPL("rsub_2.5", 2.5 - a),
      IMPL("rdiv_2", rdiv(a, 2.0)),
      IMPL("rdiv_2", 2.0 / a),
      IMPL("pow_scalar_2", pow(a, 2.0)),
      IMPL("pow_scalar_2", a.pow(2.0)),
      IMPL("pow_scalar_3", pow(a, 3.0)),
      IMPL("pow_scalar_0.5", pow(a, 0.5)),
      IMPL("pow_scalar_-1.5", pow(a, -1.5)),
      IMPL("pow_tensor", pow(a, b)),
      IMPL("pow_tensor", a.pow(b)),
      IMPL("pow_tensor_bcast", pow(a, b)),
      IMPL("maximum", maximum(a, b)),
      IMPL("minimum", minimum(a, b)),
      IMPL("clamp_-0.5_0.5", clamp(a, -0.5, 0.5)),
      IMPL("clamp_-0.5_0.5", a.clamp(-0.5, 0.5)),
      IMPL("clamp_min_-0.3", clamp(a, -0.3)),
      IMPL("clamp_max_0.2", clamp(a, std::nullopt, 0.2)),
      IMPL("neg", neg(a)),
      IMPL("neg", -a),
      IMPL("neg", a.neg()),
      IMPL("abs", abs(a)),
      IMPL("abs", a.abs()),
      IMPL("sign", sign(a)),
      IMPL("sign", a.sign()),
      IMPL("exp", exp(a)),
      IMPL("exp", a.exp()),
      IMPL("log", log(a)),
      IMPL("log", a.log()),
      IMPL("sqrt", sqrt(a)),
      IMPL("sqrt", a.sqrt()),
      IMPL("rsqrt", rsqrt(a)),
      IMPL("rsqrt", a.rsqrt()),
      IMPL("square", square(a)),
      IMPL("square", a.square()),
      IMPL("sin", sin(a)),
      IMPL("sin", a.sin()),
      IMPL("cos", cos(a)),
      IMPL("cos", a.cos()),
      IMPL("tanh", tanh(a)),
      IMPL("tanh", a.tanh()),
      IMPL("sigmoid", sigmoid(a)),
      IMPL("sigmoid", a.sigmoid()),
      IMPL("relu", relu(a)),
      IMPL("relu", a.relu()),
      IMPL("silu", silu(a)),
      IMPL("gelu_none", gelu(a)),
      IMPL("gelu_none", gelu(a, "none")),
      IMPL("gelu_tanh", gelu(a, "tanh")),
      IMPL("where", where(a, b, c)),
      IMPL("where_bcast_cond", where(a, b, c)),
      IMPL("where_scalar_0.5", where(a, b, 0.5)),
      IMPL("masked_fill_-2", masked_fill(a, b, -2.0)),
      IMPL("masked_fill_-2", a.masked_fill(b, -2.0)),
      IMPL("masked_fill_neginf", masked_fill(a, b, -kInf)),
      IMPL("tril", tril(a)),
      IMPL("tril", a.tril()),
      IMPL("tril_diag-1", tril(a, -1)),
      IMPL("tril_batched_diag1", tril(a, 1)),
      IMPL("triu", triu(a)),
      IMPL("triu", a.triu()),
      IMPL("triu_diag2", triu(a, 2)),
      IMPL("triu_batched_diag-1", triu(a, -1)),
      IMPL("eq", eq(a, b)),
      IMPL("eq", a == b),
      IMPL("eq", a.eq(b)),
      IMPL("ne", ne(a, b)),
      IMPL("ne", a != b),
      IMPL("ne", a.ne(b)),
      IMPL("lt", lt(a, b)),
      IMPL("lt", a < b),
      IMPL("lt", a.lt(b)),
      IMPL("le", le(a, b)),
      IMPL("le", a <= b),
      IMPL("le", a.le(b)),
      IMPL("gt", gt(a, b)),
      IMPL("gt", a > b),
      IMPL("gt", a.gt(b)),
      IMPL("ge", ge(a, b)),
      IMPL("ge", a >= b),
      IMPL("ge", a.ge(b)),
      IMPL("lt_bcast", lt(a, b)),
      IMPL("gt_scalar_0.1", a > 0.1),
      IMPL("gt_scalar_0.1", a.gt(0.1)),
      IMPL("le_scalar_-0.2", a <= -0.2),
      IMPL("le_scalar_-0.2", a.le(-0.2)),
      IMPL("eq_scalar_1", a == 1.0),
      IMPL("eq_scalar_1", a.eq(1.0)),
      IMPL("logical_and", logical_and(a, b)),
      IMPL("logical_and", a & b),
      IMPL("logical_or", logical_or(a, b)),
      IMPL("logical_or", a | b),
      IMPL("logical_not", logical_not(a)),
      IMPL("logical_not", ~a),
      IMPL("logical_not", a.logical_not()),
  };
}

std::vector<Impl> math_impls() {
  return {
      IMPL("floor", floor(a)),
      IMPL("floor", a.floor()),
      IMPL("ceil", ceil(a)),
      IMPL("ceil", a.ceil()),
      IMPL("round", round(a)),
      IMPL("round_halves", a.round()),
      IMPL("trunc", trunc(a)),
      IMPL("trunc", a.trunc()),
      IMPL("frac", frac(a)),
      IMPL("frac", a.frac()),
      IMPL("reciprocal", reciprocal(a)),
      IMPL("reciprocal", a.reciprocal()),
      IMPL("log1p", log1p(a)),
      IMPL("expm1", expm1(a)),
      IMPL("erf", erf(a)),
      IMPL("erfc", erfc(a)),
      IMPL("atan", atan(a)),
      IMPL("sinh", sinh(a)),
      IMPL("cosh", a.cosh()),
      IMPL("log2", log2(a)),
      IMPL("log10", a.log10()),
      IMPL("erfinv", erfinv(a)),
      IMPL("erfinv_tails", a.erfinv()),
      IMPL("asin", asin(a)),
      IMPL("acos", acos(a)),
      IMPL("tan", tan(a)),
      IMPL("atan2", atan2(a, b)),
      IMPL("atan2", a.atan2(b)),
      IMPL("fmod", fmod(a, b)),
      IMPL("fmod_scalar_-1.5", a.fmod(-1.5)),
      IMPL("remainder", remainder(a, b)),
      IMPL("remainder_scalar_1.5", a.remainder(1.5)),
      IMPL("clamp_min_op_-0.3", clamp_min(a, -0.3)),
      IMPL("clamp_max_op_0.2", a.clamp_max(0.2)),
      IMPL("isnan", isnan(a)),
      IMPL("isinf", a.isinf()),
      IMPL("isfinite", isfinite(a)),
  };
}

std::vector<Impl> activation_impls() {
  return {
      IMPL("elu", elu(a)),
      IMPL("elu_0.5", elu(a, 0.5)),
      IMPL("selu", selu(a)),
      IMPL("celu_1.5", celu(a, 1.5)),
      IMPL("softplus", softplus(a)),
      IMPL("softplus_2_1", softplus(a, 2.0, 1.0)),
      IMPL("hardtanh", hardtanh(a)),
      IMPL("hardtanh_-0.5_0.8", hardtanh(a, -0.5, 0.8)),
      IMPL("relu6", relu6(a)),
      IMPL("hardshrink", hardshrink(a)),
      IMPL("softshrink_0.3", softshrink(a, 0.3)),
      IMPL("threshold_0.1_20", threshold(a, 0.1, 20.0)),
      IMPL("leaky_relu_0.2", leaky_relu(a, 0.2)),
      IMPL("hardsigmoid", hardsigmoid(a)),
      IMPL("hardswish", hardswish(a)),
      IMPL("mish", mish(a)),
      IMPL("logsigmoid", logsigmoid(a)),
      IMPL("softsign", softsign(a)),
      IMPL("tanhshrink", tanhshrink(a)),
      IMPL("glu", glu(a)),
      IMPL("glu_dim0", glu(a, 0)),
      IMPL("prelu", prelu(a, b)),
      IMPL("prelu_shared", prelu(a, b)),
      IMPL("softmin", softmin(a, 1)),
      IMPL("rrelu_eval", rrelu(a)),
  };
}

std::vector<Impl> view_impls() {
  Impl view_fn = IMPL("view", view(a, {6, 4}));
  Impl view_method = IMPL("view", a.view({6, 4}));
  view_fn.needs_contiguous = view_method.needs_contiguous = true;
  return {
      IMPL("reshape", reshape(a, {4, 6})),
      IMPL("reshape", a.reshape({4, 6})),
      IMPL("reshape_-1", reshape(a, {-1, 4})),
      IMPL("reshape_0d_as_1", reshape(a, {1})),
      IMPL("view_0d_as_1", view(a, {1})),
      IMPL("view_0d_as_1", a.view({1})),
      view_fn,
      view_method,
      IMPL("t", a.t()),
      IMPL("t", transpose(a)),
      IMPL("transpose_0_2", transpose(a, 0, 2)),
      IMPL("transpose_0_2", a.transpose(0, 2)),
      IMPL("transpose_-1_-2", transpose(a, -1, -2)),
      IMPL("permute_2_0_1", permute(a, {2, 0, 1})),
      IMPL("permute_2_0_1", a.permute({2, 0, 1})),
      IMPL("expand_2_3_4", expand(a, {2, 3, 4})),
      IMPL("expand_2_3_4", a.expand({2, 3, 4})),
      IMPL("expand_keep_-1", expand(a, {2, -1, 4})),
      IMPL("slice_1_1_5_2", slice(a, 1, 1, 5, 2)),
      IMPL("slice_1_1_5_2", a.slice(1, 1, 5, 2)),
      IMPL("slice_1_1_5_2", a.index({Slice(), Slice(1, 5, 2)})),
      IMPL("slice_0_0_4_3", slice(a, 0, 0, 4, 3)),
      IMPL("slice_negative_-4_-1", slice(a, 1, -4, -1)),
      IMPL("slice_negative_-4_-1", a.index({Slice(), Slice(-4, -1)})),
      IMPL("narrow_0_1_2", narrow(a, 0, 1, 2)),
      IMPL("narrow_0_1_2", a.narrow(0, 1, 2)),
      IMPL("select_1_-1", select(a, 1, -1)),
      IMPL("select_1_-1", a.select(1, -1)),
      IMPL("select_0_1", select(a, 0, 1)),
      IMPL("select_0_1", a.index({1})),
      IMPL("unsqueeze_1", unsqueeze(a, 1)),
      IMPL("unsqueeze_1", a.unsqueeze(1)),
      IMPL("unsqueeze_-1", unsqueeze(a, -1)),
      IMPL("squeeze_1", squeeze(a, 1)),
      IMPL("squeeze_1", a.squeeze(1)),
      IMPL("squeeze_all", squeeze(a)),
      IMPL("squeeze_all", a.squeeze()),
      IMPL("contiguous_of_t", contiguous(a.t())),
      IMPL("contiguous_of_t", a.t().contiguous()),
      IMPL("flatten", flatten(a)),
      IMPL("flatten", a.flatten()),
      IMPL("flatten_1", flatten(a, 1)),
      IMPL("flatten_0_1", flatten(a, 0, 1)),
      IMPL("unflatten_1_3_4", a.unflatten(1, {3, 4})),
      IMPL("cat_0", cat({a, b}, 0)),
      IMPL("cat_0", cat({a, b})),
      IMPL("cat_1", cat({a, b}, 1)),
      IMPL("cat_-1_three", cat({a, b, c}, -1)),
      IMPL("stack_0", stack({a, b}, 0)),
      IMPL("stack_0", stack({a, b})),
      IMPL("stack_1_three", stack({a, b, c}, 1)),
      IMPL("stack_-1", stack({a, b}, -1)),
      IMPL("split_2_0", split(a, 2, 0)),
      IMPL("split_2_0", a.split(2)),
      IMPL("split_sizes_1_2_3_dim1", split(a, std::vector<int64_t>{1, 2, 3}, 1)),
      IMPL("split_sizes_1_2_3_dim1", a.split(std::vector<int64_t>{1, 2, 3}, 1)),
      IMPL("chunk_3_1", chunk(a, 3, 1)),
      IMPL("chunk_3_1", a.chunk(3, 1)),
      IMPL("chunk_2_0", chunk(a, 2)),
      IMPL("index_all_-1", a.index({Slice(), -1})),
      IMPL("index_ellipsis_1_3", a.index({Ellipsis, Slice(1, 3)})),
      IMPL("index_none_step2", a.index({None, Slice(), Slice(std::nullopt, std::nullopt, 2)})),
      IMPL("index_int_slice_step3", a.index({1, Slice(), Slice(0, 4, 3)})),
      IMPL("index_tensor", a.index({b})),
      // lockstep's as_strided reads a's elements in row-major order (PyTorch's reads its storage): the
      // same on the contiguous fixture inputs, and independent of the layout on the strided ones.
      IMPL("as_strided_overlapping", as_strided(a, {3, 3}, {2, 1}, 1)),
      IMPL("as_strided_3d", as_strided(a, {2, 2, 3}, {6, 1, 2})),
      IMPL("unfold_1_2_1", unfold(a, 1, 2, 1)),
      IMPL("unfold_1_2_1", a.unfold(1, 2, 1)),
      IMPL("unfold_0_2_2", unfold(a, 0, 2, 2)),
      IMPL("unfold_-1_3_2_batched", a.unfold(-1, 3, 2)),
  };
}

std::vector<Impl> indexing_impls() {
  return {
      IMPL("index_select_0", index_select(a, 0, b)),
      IMPL("index_select_0", index_select(a, b)),
      IMPL("index_select_1", index_select(a, 1, b)),
      IMPL("gather_1", gather(a, 1, b)),
      IMPL("gather_0", gather(a, 0, b)),
      IMPL("scatter_add_1", scatter_add(a, 1, b, c)),
      IMPL("scatter_add_0", scatter_add(a, 0, b, c)),
      IMPL("index_add_0", index_add(a, 0, b, c)),
      IMPL("index_add_1", index_add(a, 1, b, c)),
      IMPL("sort_-1", sort(a, -1)),
      IMPL("sort_-1", sort(a)),
      IMPL("sort_0_descending", sort(a, 0, true)),
      IMPL("argsort_1_descending", argsort(a, 1, true)),
      IMPL("topk_2_-1", topk(a, 2, -1)),
      IMPL("topk_2_-1", topk(a, 2)),
      IMPL("topk_2_0_smallest", topk(a, 2, 0, false)),
  };
}

std::vector<Impl> reduction_impls() {
  return {
      IMPL("sum_all", sum(a)),
      IMPL("sum_all", a.sum()),
      IMPL("sum_of_0d", sum(a)),
      IMPL("sum_1", sum(a, 1)),
      IMPL("sum_1", a.sum(1)),
      IMPL("sum_-1_keepdim", sum(a, -1, true)),
      IMPL("sum_dims02", sum(a, {0, 2})),
      IMPL("sum_dims02", a.sum({0, 2})),
      IMPL("sum_dims02_keepdim", sum(a, {0, 2}, true)),
      IMPL("mean_all", mean(a)),
      IMPL("mean_all", a.mean()),
      IMPL("mean_0", mean(a, 0)),
      IMPL("mean_dims12_keepdim", mean(a, {1, 2}, true)),
      IMPL("mean_dims12_keepdim", a.mean({1, 2}, true)),
      IMPL("var_all_unbiased", var(a)),
      IMPL("var_all_unbiased", a.var()),
      IMPL("var_all_biased", var(a, {}, false)),
      IMPL("var_1_biased", var(a, std::vector<int64_t>{1}, false)),
      IMPL("var_dims02_unbiased_keepdim", var(a, {0, 2}, true, true)),
      IMPL("std_all_unbiased", lockstep::std(a)),
      IMPL("std_all_unbiased", a.std()),
      IMPL("std_0_biased", lockstep::std(a, std::vector<int64_t>{0}, false)),
      IMPL("std_dims12_unbiased", lockstep::std(a, {1, 2}, true)),
      IMPL("std_dims12_unbiased", a.std({1, 2})),
      IMPL("max_all", max(a)),
      IMPL("max_all", a.max()),
      IMPL("min_all", min(a)),
      IMPL("min_all", a.min()),
      IMPL("max_1", std::get<0>(max(a, 1))),
      IMPL("max_1", std::get<0>(a.max(1))),
      IMPL("max_0_keepdim", std::get<0>(max(a, 0, true))),
      IMPL("min_-1", std::get<0>(min(a, -1))),
      IMPL("min_-1", std::get<0>(a.min(-1))),
      IMPL("amax_dims02", amax(a, {0, 2})),
      IMPL("amax_dims02", a.amax({0, 2})),
      IMPL("amin_1_keepdim", amin(a, std::vector<int64_t>{1}, true)),
      IMPL("argmax_1", argmax(a, 1)),
      IMPL("argmax_1", a.argmax(1)),
      IMPL("argmin_0_keepdim", argmin(a, 0, true)),
      IMPL("logsumexp_1", logsumexp(a, std::vector<int64_t>{1})),
      IMPL("logsumexp_1", a.logsumexp(std::vector<int64_t>{1})),
      IMPL("logsumexp_dims02_keepdim", logsumexp(a, {0, 2}, true)),
      IMPL("norm_p1_all", norm(a, 1)),
      IMPL("norm_p2_all", norm(a)),
      IMPL("norm_p2_all", a.norm()),
      IMPL("norm_p2_dims02", norm(a, 2, {0, 2})),
      IMPL("norm_p3_1", norm(a, 3, std::vector<int64_t>{1})),
      IMPL("norm_pinf_0_keepdim", norm(a, kInf, std::vector<int64_t>{0}, true)),
      IMPL("norm_pinf_all", norm(a, kInf)),
      IMPL("softmax_0", softmax(a, 0)),
      IMPL("softmax_0", a.softmax(0)),
      IMPL("softmax_1", softmax(a, 1)),
      IMPL("softmax_-1", softmax(a, -1)),
      IMPL("log_softmax_0", log_softmax(a, 0)),
      IMPL("log_softmax_0", a.log_softmax(0)),
      IMPL("log_softmax_1", log_softmax(a, 1)),
  };
}

// Each scan on the fixtures' dims 1, -1, 0 and a 0-D input, as a function and as a method; then the
// dtype rules (int64 and bool inputs, dtype=), cumprod's zeros, infinities, ties and NaN.
std::vector<Impl> scan_impls() {
  std::vector<Impl> impls;
  auto add = [&](const std::string& name, const std::string& call, std::function<Outputs(const Tensor&)> f) {
    impls.push_back(Impl{name, call, [f](const std::vector<Tensor>& x) { return f(x[0]); }});
  };
  for (const auto& [suffix, dim] : {std::pair<std::string, int64_t>{"_1", 1}, {"_-1", -1}, {"_0", 0}, {"_of_0d", 0}}) {
    const int64_t d = dim;
    const std::string at = std::to_string(d);
    add("cumsum" + suffix, "cumsum(a, " + at + ")", [d](const Tensor& a) { return outputs(cumsum(a, d)); });
    add("cumsum" + suffix, "a.cumsum(" + at + ")", [d](const Tensor& a) { return outputs(a.cumsum(d)); });
    add("cumprod" + suffix, "cumprod(a, " + at + ")", [d](const Tensor& a) { return outputs(cumprod(a, d)); });
    add("cumprod" + suffix, "a.cumprod(" + at + ")", [d](const Tensor& a) { return outputs(a.cumprod(d)); });
    add("logcumsumexp" + suffix, "logcumsumexp(a, " + at + ")",
        [d](const Tensor& a) { return outputs(logcumsumexp(a, d)); });
    add("logcumsumexp" + suffix, "a.logcumsumexp(" + at + ")",
        [d](const Tensor& a) { return outputs(a.logcumsumexp(d)); });
    add("cummax" + suffix, "cummax(a, " + at + ")", [d](const Tensor& a) { return outputs(cummax(a, d)); });
    add("cummax" + suffix, "a.cummax(" + at + ")", [d](const Tensor& a) { return outputs(a.cummax(d)); });
    add("cummin" + suffix, "cummin(a, " + at + ")", [d](const Tensor& a) { return outputs(cummin(a, d)); });
    add("cummin" + suffix, "a.cummin(" + at + ")", [d](const Tensor& a) { return outputs(a.cummin(d)); });
  }
  std::vector<Impl> rest = {
      IMPL("cumsum_0_int64", cumsum(a, 0)),
      IMPL("cumsum_1_bool", cumsum(a, 1)),
      IMPL("cumsum_1_bool", a.cumsum(1)),
      IMPL("cumprod_0_int64", cumprod(a, 0)),
      IMPL("cumprod_-1_bool", cumprod(a, -1)),
      IMPL("cumsum_1_dtype_float64", cumsum(a, 1, kFloat64)),
      IMPL("cumsum_1_dtype_float64", a.cumsum(1, kFloat64)),
      IMPL("cumsum_0_dtype_float32", to(cumsum(a, 0, kFloat32), kFloat64)),
      IMPL("cumsum_0_dtype_float32", a.cumsum(0, kFloat32).double_()),
      IMPL("cumprod_1_dtype_float32", to(cumprod(a, 1, kFloat32), kFloat64)),
      IMPL("cummax_1_int64", cummax(a, 1)),
      IMPL("cumprod_-1_zeros", cumprod(a, -1)),
      IMPL("cumprod_0_zeros", cumprod(a, 0)),
      IMPL("cumprod_1_zeros_3d", cumprod(a, 1)),
      IMPL("logcumsumexp_-1_inf", logcumsumexp(a, -1)),
      IMPL("cummax_-1_ties_nan", cummax(a, -1)),
      IMPL("cummin_-1_ties_nan", cummin(a, -1)),
      IMPL("cummax_0_ties_nan", cummax(a, 0)),
  };
  impls.insert(impls.end(), rest.begin(), rest.end());
  return impls;
}

std::vector<Impl> linalg_impls() {
  std::vector<Impl> impls;
  for (const char* name : {"matmul_1d_1d", "matmul_1d_2d", "matmul_2d_1d", "matmul_2d_2d", "matmul_1d_3d",
                           "matmul_3d_1d", "matmul_2d_3d", "matmul_BTC_CD", "matmul_BHTD_BHDT", "matmul_bcast_batch"}) {
    Impl fn = IMPL("", matmul(a, b)), method = IMPL("", a.matmul(b));
    fn.name = method.name = name;
    impls.push_back(fn);
    impls.push_back(method);
  }
  std::vector<Impl> rest = {
      IMPL("matmul_t_t", matmul(a.t(), b.t())),
      IMPL("matmul_batched_transposed", matmul(a.transpose(-2, -1), b.transpose(1, 2))),
      IMPL("matmul_q_kT", matmul(a, b.transpose(-2, -1))),
      IMPL("linear_3d_bias", linear(a, b, c)),
      IMPL("linear_3d_nobias", linear(a, b)),
      IMPL("linear_1d_bias", linear(a, b, c)),
      IMPL("nll_loss", nll_loss(a, b)),
      IMPL("cross_entropy_composition", nll_loss(log_softmax(a, 1), b)),
      IMPL("layer_norm_composition",
           (a - mean(a, -1, true)) / sqrt(var(a, std::vector<int64_t>{-1}, false, true) + 1e-5) * b + c),
      IMPL("to_float32_and_back", to(to(a, kFloat32), kFloat64)),
      IMPL("to_float32_and_back", a.float_().double_()),
      IMPL("clone", clone(a)),
      IMPL("clone", a.clone()),
  };
  impls.insert(impls.end(), rest.begin(), rest.end());
  return impls;
}

// flip, roll, repeat, repeat_interleave, meshgrid, outer, cross, bmm / addmm / baddbmm, lerp, one_hot, the
// triangle indices (autograd/composite.cpp) and einsum (autograd/einsum.cpp), as functions and methods.
std::vector<Impl> composite_impls() {
  std::vector<Impl> impls = {
      IMPL("flip_0", flip(a, {0})),
      IMPL("flip_0", a.flip({0})),
      IMPL("flip_-1_0", flip(a, {-1, 0})),
      IMPL("roll_1_0", roll(a, 1, 0)),
      IMPL("roll_1_0", a.roll(1, 0)),
      IMPL("roll_1_0", roll(a, std::vector<int64_t>{1}, std::vector<int64_t>{0})),
      IMPL("roll_-2_flat", roll(a, -2)),
      IMPL("roll_-2_flat", a.roll({-2})),
      IMPL("roll_5_-1_dims12", roll(a, {5, -1}, {1, 2})),
      IMPL("roll_5_-1_dims12", a.roll({5, -1}, {1, 2})),
      IMPL("repeat_2_3", repeat(a, {2, 3})),
      IMPL("repeat_2_3", a.repeat({2, 3})),
      IMPL("repeat_2_1_3_new_dim", a.repeat({2, 1, 3})),
      IMPL("repeat_interleave_2_flat", repeat_interleave(a, 2)),
      IMPL("repeat_interleave_2_flat", a.repeat_interleave(2)),
      IMPL("repeat_interleave_3_dim1", repeat_interleave(a, 3, 1)),
      IMPL("repeat_interleave_3_dim1", a.repeat_interleave(3, -1)),
      IMPL("repeat_interleave_tensor_dim0", repeat_interleave(a, b, 0)),
      IMPL("repeat_interleave_tensor_dim0", a.repeat_interleave(b, 0)),
      IMPL("repeat_interleave_indices", repeat_interleave(a)),
      IMPL("meshgrid_ij", meshgrid({a, b, c})),
      IMPL("meshgrid_ij", meshgrid({a, b, c}, "ij")),
      IMPL("meshgrid_xy", meshgrid({a, b, c}, "xy")),
      IMPL("outer", outer(a, b)),
      IMPL("outer", a.outer(b)),
      IMPL("cross_dim1", cross(a, b, 1)),
      IMPL("cross_dim1", cross(a, b)),  // the first dimension of size 3
      IMPL("cross_dim1", a.cross(b, -1)),
      IMPL("cross_bcast_dim-1", cross(a, b, -1)),
      IMPL("cross_dim0", cross(a, b, 0)),
      IMPL("cross_dim0", a.cross(b)),
      IMPL("bmm", bmm(a, b)),
      IMPL("bmm", a.bmm(b)),
      IMPL("addmm_bcast", addmm(a, b, c)),
      IMPL("addmm_bcast", a.addmm(b, c)),
      IMPL("addmm_beta0.5_alpha2", addmm(a, b, c, 0.5, 2.0)),
      IMPL("baddbmm", baddbmm(a, b, c)),
      IMPL("baddbmm_beta-1_alpha0.5", baddbmm(a, b, c, -1.0, 0.5)),
      IMPL("baddbmm_beta-1_alpha0.5", a.baddbmm(b, c, -1.0, 0.5)),
      IMPL("lerp_scalar_0.3", lerp(a, b, 0.3)),
      IMPL("lerp_scalar_0.3", a.lerp(b, 0.3)),
      IMPL("lerp_scalar_0.8_bcast", lerp(a, b, 0.8)),
      IMPL("lerp_tensor", lerp(a, b, c)),
      IMPL("lerp_tensor", a.lerp(b, c)),
      IMPL("one_hot", one_hot(a)),
      IMPL("one_hot_5", one_hot(a, 5)),
      IMPL("tril_indices_4_3", tril_indices(4, 3)),
      IMPL("tril_indices_3_4_1", tril_indices(3, 4, 1)),
      IMPL("triu_indices_4_5_-1", triu_indices(4, 5, -1)),
      IMPL("triu_indices_3_3", triu_indices(3, 3)),
  };
  // einsum over all of the case's inputs; "_bcast": the equation again, its b of size 1 in one operand.
  for (const std::string equation : {"ij,jk->ik", "bij,bjk->bik", "bhqd,bhkd->bhqk", "ii->i", "ii", "i,i->", "ij->ji",
                                     "...ij,...jk->...ik", "bn,anm,bm->ba", "ij,jk", "ab,Bb", "i,j->ij", "ij,ij->ij",
                                     "bii->bi", "iji->j", "ijk->", "...ij->ij", "i...->...", "abc,cd,de->abe",
                                     "bij,bjk->bik_bcast", "ij,jk,kl->il"}) {
    const std::string eq = equation.substr(0, equation.find('_'));
    impls.push_back(Impl{"einsum_" + equation, "einsum(\"" + eq + "\", inputs)",
                         [eq](const std::vector<Tensor>& x) { return outputs(einsum(eq, x)); }});
  }
  return impls;
}

// The same values as x in a non-contiguous layout: transposed storage where the last two dimensions are
// both longer than 1, else every other element (from offset 1) of a larger buffer along the last
// dimension longer than 1.
Tensor strided_copy(const Tensor& x) {
  NoGradGuard no_grad;
  if (x.dim() >= 2 && x.size(-1) > 1 && x.size(-2) > 1) return x.transpose(-1, -2).contiguous().transpose(-1, -2);
  int64_t d = x.dim() - 1;
  while (d >= 0 && x.size(d) == 1) --d;
  if (d < 0) return x.clone();
  Shape big_shape = x.shape();
  big_shape[d] = 2 * x.size(d) + 1;
  Tensor v = zeros(big_shape, x.dtype()).slice(d, 1, big_shape[d], 2);
  v.copy_(x);
  return v;
}

// "" when got matches want (shape, dtype, and every element within atol + rtol * |want|; equal
// infinities and NaNs match), else what differs.
std::string mismatch(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (!got.defined()) return "undefined";
  if (got.shape() != want.shape()) return "shape " + shape_str(got.shape()) + ", want " + shape_str(want.shape());
  if (got.dtype() != want.dtype()) return std::string("dtype ") + dtype_name(got.dtype()) + ", want " + dtype_name(want.dtype());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))) continue;
    if (std::isfinite(w[i]) && std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i])) continue;
    std::ostringstream os;
    os.precision(17);
    os << "element " << i << ": " << g[i] << ", want " << w[i] << " (diff " << g[i] - w[i] << ")";
    return os.str();
  }
  return "";
}

struct Run {
  Outputs outs;
  std::vector<Tensor> inputs;  // their .grad() holds the gradients
};

// Runs impl on the fixture's inputs (or non-contiguous copies), then backward from sum(out * w).
Run run(const Impl& impl, const Fixture& f, bool strided) {
  Run r;
  for (size_t k = 0; k < f.inputs.size(); ++k) {
    Tensor x = strided ? strided_copy(f.inputs[k]) : f.inputs[k].clone();
    if (strided && x.numel() > 1) REQUIRE_MESSAGE(!x.is_contiguous(), "input ", k, " ", x.shape());
    if (f.grads[k].defined()) x.set_requires_grad(true);
    r.inputs.push_back(x);
  }
  r.outs = impl.fn(r.inputs);
  LOCKSTEP_CHECK(r.outs.size() == f.outs.size(), r.outs.size(), " outputs, PyTorch has ", f.outs.size());
  Tensor loss;
  for (size_t k = 0; k < f.outs.size(); ++k) {
    if (!f.weights[k].defined()) continue;
    LOCKSTEP_CHECK(r.outs[k].requires_grad(), "output ", k, " does not require a gradient (PyTorch's does)");
    // 0-d outputs skip the sum: sum of a 0-d tensor is a case of its own ("sum_of_0d").
    Tensor term = r.outs[k].dim() == 0 ? r.outs[k] * f.weights[k] : sum(r.outs[k] * f.weights[k]);
    loss = loss.defined() ? loss + term : term;
  }
  if (loss.defined()) loss.backward();
  return r;
}

constexpr double kRtol = 1e-10, kAtol = 1e-12;        // against PyTorch
constexpr double kSameRtol = 1e-14, kSameAtol = 1e-14;  // strided run against contiguous run

void check_impl(const Impl& impl) {
  const auto it = fixtures().find(impl.name);
  if (it == fixtures().end()) {
    FAIL_CHECK("no fixture case '", impl.name, "' for ", impl.call, " (regenerate with tools/fixtures/make_op_fixtures.py?)");
    return;
  }
  const Fixture& f = it->second;
  const std::string what = impl.name + " [" + impl.call + " vs PyTorch's " + f.expr + "]";
  Run contiguous, strided;
  try {
    contiguous = run(impl, f, false);
  } catch (const std::exception& e) {
    FAIL_CHECK(what, ": threw: ", std::string(e.what()));
    return;
  }
  for (size_t k = 0; k < f.outs.size(); ++k) {
    const std::string m = mismatch(contiguous.outs[k], f.outs[k], kRtol, kAtol);
    CHECK_MESSAGE(m.empty(), what, " output ", k, ": ", m);
  }
  for (size_t k = 0; k < f.inputs.size(); ++k) {
    if (!f.grads[k].defined()) continue;
    const std::string m = mismatch(contiguous.inputs[k].grad(), f.grads[k], kRtol, kAtol);
    CHECK_MESSAGE(m.empty(), what, " gradient of input ", k, ": ", m);
  }
  if (impl.needs_contiguous) {
    try {
      run(impl, f, true);
      FAIL_CHECK(what, ": on a non-contiguous input it must throw (as PyTorch's view does)");
    } catch (const Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find("view") != std::string::npos, what, ": ", std::string(e.what()));
    }
    return;
  }
  try {
    strided = run(impl, f, true);
  } catch (const std::exception& e) {
    FAIL_CHECK(what, " on non-contiguous inputs: threw: ", std::string(e.what()));
    return;
  }
  for (size_t k = 0; k < f.outs.size(); ++k) {
    std::string m = mismatch(strided.outs[k], f.outs[k], kRtol, kAtol);
    CHECK_MESSAGE(m.empty(), what, " on non-contiguous inputs, output ", k, ": ", m);
    m = mismatch(strided.outs[k], contiguous.outs[k], kSameRtol, kSameAtol);
    CHECK_MESSAGE(m.empty(), what, " output ", k, " differs between non-contiguous and contiguous inputs: ", m);
  }
  for (size_t k = 0; k < f.inputs.size(); ++k) {
    if (!f.grads[k].defined()) continue;
    std::string m = mismatch(strided.inputs[k].grad(), f.grads[k], kRtol, kAtol);
    CHECK_MESSAGE(m.empty(), what, " on non-contiguous inputs, gradient of input ", k, ": ", m);
    m = mismatch(strided.inputs[k].grad(), contiguous.inputs[k].grad(), kSameRtol, kSameAtol);
    CHECK_MESSAGE(m.empty(), what, " gradient of input ", k, " differs between non-contiguous and contiguous inputs: ", m);
  }
}

void check_all(const std::vector<Impl>& impls) {
  for (const Impl& impl : impls) check_impl(impl);
}

}  // namespace

TEST_CASE("every fixture case has a lockstep counterpart, and every counterpart a fixture case") {
  std::set<std::string> implemented;
  for (auto impls : {elementwise_impls(), view_impls(), indexing_impls(), reduction_impls(), linalg_impls(),
                     math_impls(), activation_impls(), scan_impls(), composite_impls()})
    for (const Impl& impl : impls) implemented.insert(impl.name);
  REQUIRE(fixtures().size() > 150);
  for (const auto& [name, f] : fixtures()) {
    CHECK_MESSAGE(implemented.count(name), "fixture case '", name, "' (", f.expr, ") has no C++ counterpart");
    CHECK_MESSAGE(f.outs.size() >= 1, name);
    for (size_t k = 0; k < f.inputs.size(); ++k) CHECK_MESSAGE(f.inputs[k].defined(), name, " input ", k);
  }
  for (const std::string& name : implemented) CHECK_MESSAGE(fixtures().count(name), "stale C++ case '", name, "'");
}

TEST_CASE("elementwise ops match PyTorch, on contiguous and non-contiguous inputs") { check_all(elementwise_impls()); }
TEST_CASE("views, cat, stack, split and chunk match PyTorch") { check_all(view_impls()); }
TEST_CASE("elementwise math (rounding, logs, trig, erf, remainders, isnan) matches PyTorch") { check_all(math_impls()); }
TEST_CASE("activations match PyTorch, values and gradients") { check_all(activation_impls()); }
TEST_CASE("indexing, sort and topk match PyTorch") { check_all(indexing_impls()); }
TEST_CASE("reductions and softmax match PyTorch") { check_all(reduction_impls()); }
TEST_CASE("scans (cumsum, cumprod, logcumsumexp, cummax, cummin) match PyTorch, values, indices and gradients") {
  check_all(scan_impls());
}
TEST_CASE("flip, roll, repeat, meshgrid, cross, bmm/addmm, lerp, one_hot, tril_indices and einsum match PyTorch") {
  check_all(composite_impls());
}
TEST_CASE("matmul in every rank combination, linear, nll_loss and compositions match PyTorch") {
  check_all(linalg_impls());
}
