// The scatter family and the ops sized by their values against PyTorch: tests/fixtures/scatter_fixtures.safetensors
// (tools/fixtures/make_scatter_fixtures.py) holds each case's inputs, outputs and the gradients of
// sum(out * w). Every case runs through the functions, and where there is one through the in-place method
// (on a non-leaf, so the gradient goes through the rebased history). Then float64 gradchecks (ties and
// zeros kept away), hand-computed values, nn::utils' parameter vectors, and bad input named by the op.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "nn/utils/convert_parameters.h"
#include "tensor/safetensors.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

namespace {

using namespace lockstep;
using lockstep::testing::expect_error;
using lockstep::testing::gradcheck;

constexpr const char* kFixtures = "tests/fixtures/scatter_fixtures.safetensors";

struct Fixture {
  std::string expr;
  std::vector<Tensor> inputs, outs, weights, grads;
};

void put(std::vector<Tensor>& v, size_t k, const Tensor& t) {
  if (v.size() <= k) v.resize(k + 1);
  v[k] = t;
}

const std::map<std::string, Fixture>& fixtures() {
  static const std::map<std::string, Fixture> all = [] {
    SafetensorsFile file = load_safetensors(kFixtures);
    std::map<std::string, Fixture> cases;
    for (auto& [key, value] : file.tensors) {
      const size_t slash = key.find('/');
      const std::string name = key.substr(0, slash), part = key.substr(slash + 1);
      Tensor t = file.metadata.count(key) && file.metadata.at(key) == "bool" ? value.to(kBool) : value;
      Fixture& f = cases[name];
      auto number = [&](size_t prefix) { return std::stoul(part.substr(prefix)); };
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

using Outputs = std::vector<Tensor>;
using Impl = std::function<Outputs(const std::vector<Tensor>&)>;
Outputs outputs(const Tensor& t) { return {t}; }
Outputs outputs(const std::tuple<Tensor, Tensor, Tensor>& t) { return {std::get<0>(t), std::get<1>(t), std::get<2>(t)}; }

#define IMPL(...)                                                                                   \
  [](const std::vector<Tensor>& x) -> Outputs {                                                     \
    [[maybe_unused]] const Tensor a = x[0], b = x.size() > 1 ? x[1] : Tensor(),                     \
                                  c = x.size() > 2 ? x[2] : Tensor(), d = x.size() > 3 ? x[3] : Tensor(); \
    return outputs(__VA_ARGS__);                                                                    \
  }

// An in-place form on a non-leaf copy of a (a * 1), so its old history is mul's.
Tensor nonleaf(const Tensor& a) { return a.is_floating_point() ? a * 1.0 : a.clone(); }

// Each fixture case's implementations: functions, methods and the in-place methods.
std::multimap<std::string, Impl> impls() {
  std::multimap<std::string, Impl> m;
  auto add = [&](const char* name, Impl f) { m.emplace(name, std::move(f)); };
  add("scatter_src", IMPL(scatter(a, 1, b, c)));
  add("scatter_src", IMPL(a.scatter(1, b, c)));
  add("scatter_src", IMPL([&] { Tensor t = nonleaf(a); t.scatter_(1, b, c); return t; }()));
  add("scatter_value", IMPL(scatter(a, 0, b, 2.5)));
  add("scatter_value", IMPL([&] { Tensor t = nonleaf(a); t.scatter_(0, b, 2.5); return t; }()));
  add("scatter_add_reduce", IMPL(scatter(a, 0, b, c, "add")));
  add("scatter_add_reduce", IMPL([&] { Tensor t = nonleaf(a); t.scatter_(0, b, c, "add"); return t; }()));
  add("scatter_multiply_reduce", IMPL(scatter(a, 0, b, c, "multiply")));
  add("scatter_multiply_reduce", IMPL([&] { Tensor t = nonleaf(a); t.scatter_(0, b, c, "multiply"); return t; }()));
  add("scatter_value_multiply", IMPL(scatter(a, 0, b, 3.0, "multiply")));
  add("scatter_value_multiply", IMPL([&] { Tensor t = nonleaf(a); t.scatter_(0, b, 3.0, "multiply"); return t; }()));
  for (const char* r : {"sum", "prod", "mean", "amax", "amin"})
    for (bool self : {true, false}) {
      const std::string name = std::string("scatter_reduce_") + r + (self ? "_self" : "_noself");
      m.emplace(name, [r, self](const std::vector<Tensor>& x) -> Outputs {
        return {scatter_reduce(x[0], 0, x[1], x[2], r, self)};
      });
      m.emplace(name, [r, self](const std::vector<Tensor>& x) -> Outputs {
        Tensor t = nonleaf(x[0]);
        t.scatter_reduce_(0, x[1], x[2], r, self);
        return {t};
      });
    }
  add("scatter_reduce_amax_dim2", IMPL(a.scatter_reduce(-1, b, c, "amax")));
  add("scatter_reduce_mean_dim1", IMPL(a.scatter_reduce(1, b, c, "mean", false)));
  add("index_put_1", IMPL(index_put(a, {b}, c)));
  add("index_put_1", IMPL([&] { Tensor t = nonleaf(a); t.index_put_({b}, c); return t; }()));
  add("index_put_accumulate", IMPL(a.index_put({b}, c, true)));
  add("index_put_accumulate", IMPL([&] { Tensor t = nonleaf(a); t.index_put_({b}, c, true); return t; }()));
  add("index_put_2_broadcast", IMPL(index_put(a, {b, c}, d)));
  add("index_put_2_accumulate", IMPL(index_put(a, {b, c}, d, true)));
  add("index_put_mask_rows", IMPL(index_put(a, {b}, c)));
  add("index_put_mask_2d", IMPL([&] { Tensor t = nonleaf(a); t.index_put_({b}, c, true); return t; }()));
  add("masked_select_broadcast", IMPL(a.masked_select(b)));
  add("masked_select_same", IMPL(masked_select(a, b)));
  add("masked_scatter", IMPL(a.masked_scatter(b, c)));
  add("masked_scatter_broadcast", IMPL(masked_scatter(a, b, c)));
  add("nonzero", IMPL(nonzero(a)));
  add("nonzero", IMPL(a.argwhere()));
  add("nonzero_3d", IMPL(a.nonzero()));
  add("unique", IMPL(_unique2(a, true, true, true)));
  add("unique", IMPL(unique(a, false, true, true)));
  add("unique_float", IMPL(_unique2(a, true, true, true)));
  add("unique_consecutive", IMPL(unique_consecutive(a, true, true)));
  add("bincount", IMPL(bincount(a)));
  add("bincount_weights", IMPL(a.bincount(b, 10)));
  add("histc", IMPL(histc(a, 6, -1, 1)));
  add("histc_range", IMPL(a.histc(5)));
  add("clamp_min_tensor", IMPL(a.clamp_min(b)));
  add("clamp_max_tensor", IMPL(clamp_max(a, b)));
  return m;
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  REQUIRE_MESSAGE(got.defined(), what, ": undefined");
  CHECK_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs PyTorch's ", want.shape());
  if (got.shape() != want.shape()) return;
  if (!want.is_floating_point()) {
    CHECK_MESSAGE(got.dtype() == kInt64, what, ": dtype ", got.dtype(), ", PyTorch's int64");
    CHECK_MESSAGE(got.to_vector<int64_t>() == want.to_vector<int64_t>(), what, ": ", got, " vs PyTorch's ", want);
    return;
  }
  CHECK_MESSAGE(allclose(got.detach().to(kFloat64), want, 1e-12, 1e-12), what, ": ", got, " vs PyTorch's ", want);
}

}  // namespace

TEST_CASE("scatter, scatter_reduce, index_put and the selections: values and gradients against PyTorch's") {
  const auto all = impls();
  for (const auto& [name, f] : fixtures()) {
    CAPTURE(name);
    REQUIRE_MESSAGE(all.count(name) > 0, "fixture case ", name, " (", f.expr, ") has no C++ counterpart");
    auto [first, last] = all.equal_range(name);
    for (auto it = first; it != last; ++it) {
      std::vector<Tensor> in;
      for (size_t k = 0; k < f.inputs.size(); ++k) {
        Tensor x = f.inputs[k].clone();
        if (f.grads[k].defined()) x.set_requires_grad(true);
        in.push_back(x);
      }
      const Outputs out = it->second(in);
      REQUIRE(out.size() == f.outs.size());
      Tensor loss;
      for (size_t k = 0; k < out.size(); ++k) {
        check_close(out[k], f.outs[k], name + " output " + std::to_string(k));
        if (f.weights[k].defined() && out[k].requires_grad()) {
          Tensor term = sum(out[k] * f.weights[k]);
          loss = loss.defined() ? loss + term : term;
        }
      }
      if (!loss.defined()) continue;
      loss.backward();
      for (size_t k = 0; k < in.size(); ++k)
        if (f.grads[k].defined()) check_close(in[k].grad(), f.grads[k], name + " gradient " + std::to_string(k));
    }
  }
}

TEST_CASE("gradcheck: scatter and scatter_reduce (src larger than index), index_put, masked ops, clamp bounds") {
  manual_seed(3);
  auto idx = [](std::vector<int64_t> v, const Shape& s) { return tensor(v, s); };
  // Rows 0..3 of [4, 3]; each column sends three of its four sources, some to one target.
  const Tensor i = idx({0, 1, 3, 2, 1, 3, 0, 1, 0}, {3, 3});
  using V = const std::vector<Tensor>&;
  gradcheck([&](V x) { return scatter(x[0], 0, idx({3, 0, 1, 1, 2, 0}, {2, 3}), x[1]); },
            {randn({4, 3}, kFloat64), randn({3, 4}, kFloat64)});
  gradcheck([&](V x) { return scatter(x[0], 1, idx({2, 0}, {2, 1}), -1.0); }, {randn({2, 3}, kFloat64)});
  for (const char* r : {"sum", "prod", "mean", "amax", "amin"})
    for (bool self : {true, false}) {
      CAPTURE(r);
      CAPTURE(self);
      // Distinct values (no ties for amax/amin), away from zero (prod's division).
      Tensor a = rand({4, 3}, kFloat64) + 0.5, src = rand({4, 4}, kFloat64) + 0.5;
      gradcheck([&](V x) { return scatter_reduce(x[0], 0, i, x[1], r, self); }, {a, src});
      gradcheck([&](V x) {
        Tensor t = x[0] * 1.0;
        t.scatter_reduce_(0, i, x[1], r, self);
        return t;
      }, {a.detach().clone(), src.detach().clone()});
    }
  const Tensor rows = idx({2, 0, -1}, {3});
  for (bool acc : {false, true})
    gradcheck([&](V x) { return index_put(x[0], {rows}, x[1], acc); }, {randn({4, 2}, kFloat64), randn({2}, kFloat64)});
  gradcheck([&](V x) {
    Tensor t = x[0] * 2.0;
    t.index_put_({idx({1, 1, 0}, {3}), idx({0, 0, 2}, {3})}, x[1], true);
    return t;
  }, {randn({2, 3}, kFloat64), randn({3}, kFloat64)});
  const Tensor mask = tensor(std::vector<int64_t>{1, 0, 1, 1}).to(kBool);
  gradcheck([&](V x) { return masked_select(x[0], mask); }, {randn({3, 4}, kFloat64)});
  gradcheck([&](V x) { return masked_scatter(x[0], mask, x[1]); }, {randn({2, 4}, kFloat64), randn({7}, kFloat64)});
  // Bounds 0.5 apart from the values: no ties.
  Tensor lo = tensor(std::vector<double>{-10, 10, -10, 10});
  gradcheck([&](V x) { return clamp_min(x[0], x[1]); }, {rand({3, 4}, kFloat64), lo.clone()});
  gradcheck([&](V x) { return clamp_max(x[0], x[1]); }, {rand({3, 4}, kFloat64), lo.clone()});
}

TEST_CASE("hand-computed: one-hot by scatter_, integer reductions, include_self, bool masks, in-place no grad") {
  Tensor onehot = zeros({2, 4});
  const Tensor& same = onehot.scatter_(1, tensor(std::vector<int64_t>{1, 3}, {2, 1}), 1.0);
  CHECK(same.is_same(onehot));
  CHECK(onehot.to_vector<float>() == std::vector<float>{0, 1, 0, 0, 0, 0, 0, 1});
  CHECK(onehot.version() > 0);
  const Tensor at = tensor(std::vector<int64_t>{0, 0, 2, 2, 2});
  const Tensor ints = tensor(std::vector<int64_t>{1, 2, 3});
  const Tensor src = tensor(std::vector<int64_t>{4, -5, 6, 7, 2});
  CHECK(scatter_reduce(ints, 0, at, src, "amax").to_vector<int64_t>() == std::vector<int64_t>{4, 2, 7});
  CHECK(scatter_reduce(ints, 0, at, src, "amin", false).to_vector<int64_t>() == std::vector<int64_t>{-5, 2, 2});
  CHECK(scatter_reduce(ints, 0, at, src, "prod").to_vector<int64_t>() == std::vector<int64_t>{-20, 2, 252});
  CHECK(scatter_reduce(ints, 0, at, src, "sum", false).to_vector<int64_t>() == std::vector<int64_t>{-1, 2, 15});
  // mean of integers rounds down: (1 + 4 - 5) / 3 = 0, (3 + 6 + 7 + 2) / 4 = 4.5 -> 4.
  CHECK(scatter_reduce(ints, 0, at, src, "mean").to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4});
  // A bool mask on the rows, a scalar-shaped value broadcast.
  Tensor m = zeros({3, 2});
  m.index_put_({tensor(std::vector<int64_t>{1, 0, 1}).to(kBool)}, full({}, 7.0));
  CHECK(m.to_vector<float>() == std::vector<float>{7, 7, 0, 0, 7, 7});
  m.index_put_({Slice(), 1}, -1.0);  // no tensor index: a copy into the view
  CHECK(m.to_vector<float>() == std::vector<float>{7, -1, 0, -1, 7, -1});
  m.index_put_({tensor(std::vector<int64_t>{2, 2}), tensor(std::vector<int64_t>{0, 0})}, full({}, 0.5), true);
  CHECK(m.to_vector<float>() == std::vector<float>{7, -1, 0, -1, 8, -1});
  CHECK(nonzero(zeros({2, 3})).shape() == Shape{0, 2});
  CHECK(nonzero(full({}, 2.0)).shape() == Shape{1, 0});
  auto [u, inv, cnt] = unique(tensor(std::vector<int64_t>{2, 2, 1}));
  CHECK(u.to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK((inv.numel() == 0 && cnt.numel() == 0));  // not asked for
  CHECK(histc(tensor(std::vector<float>{1, 1, 1}), 4).to_vector<float>() == std::vector<float>{0, 0, 3, 0});
}

// An index repeated along the dimensions after dim (a graph's edge targets expanded over the features) is
// read once per row by the kernels: the same values and gradients as the index copied out in full.
TEST_CASE("scatters with an index expanded along the inner dimensions equal the materialized index's") {
  manual_seed(5);
  struct Case {
    Shape self, src, rows;  // rows: the index before expand, size 1 after dim
    int64_t dim, n;
  };
  // The last case's index covers 3 of self's 5 columns: the other two are never reached.
  for (const Case& c : {Case{{6, 5}, {9, 5}, {9, 1}, 0, 6}, Case{{3, 4, 2, 5}, {3, 7, 2, 5}, {3, 7, 1, 1}, 1, 4},
                        Case{{6, 5}, {9, 3}, {9, 1}, 0, 6}}) {
    Tensor self = randn(c.self, kFloat64), src = randn(c.src, kFloat64);
    Tensor expanded = randint(0, c.n, c.rows).expand(c.src), full = expanded.contiguous();
    CHECK(expanded.stride(-1) == 0);
    for (const char* r : {"sum", "prod", "mean", "amax", "amin"})
      for (bool include_self : {true, false}) {
        INFO(r, " include_self=", include_self, " dim ", c.dim);
        auto run = [&](const Tensor& index, Tensor& gs, Tensor& gx) {
          Tensor a = self.detach().set_requires_grad(), b = src.detach().set_requires_grad();
          Tensor y = a.scatter_reduce(c.dim, index, b, r, include_self);
          sum(y * y).backward();
          gs = a.grad(), gx = b.grad();
          return y;
        };
        Tensor gs1, gx1, gs2, gx2;
        Tensor y1 = run(expanded, gs1, gx1), y2 = run(full, gs2, gx2);
        CHECK(internal::allclose(y1, y2, 0, 1e-12));
        CHECK(internal::allclose(gs1, gs2, 0, 1e-12));
        CHECK(internal::allclose(gx1, gx2, 0, 1e-12));
      }
    CHECK(internal::allclose(self.scatter_add(c.dim, expanded, src), self.scatter_add(c.dim, full, src), 0, 1e-12));
    CHECK(internal::allclose(self.scatter(c.dim, expanded, src), self.scatter(c.dim, full, src), 0, 0));
  }
}

// Integer rows of kRadixMin (1024) elements or more sort by radix, shorter ones by comparison: both are
// stable (equal values keep their order, also descending) and agree with float64's order.
TEST_CASE("sort: integer rows by radix and by comparison, stable, both directions, negative values") {
  manual_seed(9);
  for (int64_t n : {300, 3000}) {
    Tensor a = randint(-50, 50, {2, n});  // many repeats, both signs
    for (bool descending : {false, true}) {
      INFO("n ", n, " descending ", descending);
      auto [v, i] = sort(a, -1, descending);
      auto [fv, fi] = sort(a.to(kFloat64), -1, descending);  // the comparison sort
      CHECK(internal::allclose(v.to(kFloat64), fv, 0, 0));
      CHECK(sum(ne(i, fi)).item<double>() == 0);  // the same stable order, position for position
      // stability by hand: along each run of equal values the positions increase
      const auto vv = v.to_vector<int64_t>(), iv = i.to_vector<int64_t>();
      bool stable = true;
      for (size_t k = 1; k < vv.size(); ++k)
        if (static_cast<int64_t>(k) % n != 0 && vv[k] == vv[k - 1]) stable = stable && iv[k] > iv[k - 1];
      CHECK(stable);
    }
    CHECK(std::get<0>(sort(tensor(std::vector<int64_t>{INT64_MIN, 5, -1, INT64_MAX}, {4}))).to_vector<int64_t>() ==
          std::vector<int64_t>{INT64_MIN, -1, 5, INT64_MAX});
  }
  Tensor big = randint(-1000000000000, 1000000000000, {5000});  // digits above the first three vary
  auto [v, i] = sort(big);
  auto [fv, fi] = sort(big.to(kFloat64));
  CHECK(internal::allclose(v.to(kFloat64), fv, 0, 0));
  CHECK(sum(ne(i, fi)).item<double>() == 0);
}

TEST_CASE("nn::utils::parameters_to_vector and vector_to_parameters") {
  Tensor w = randn({2, 3}).set_requires_grad(), b = randn({2}).set_requires_grad();
  Tensor v = nn::utils::parameters_to_vector({w, b});
  CHECK(v.shape() == Shape{8});
  std::vector<float> want = w.to_vector<float>(), wb = b.to_vector<float>();
  want.insert(want.end(), wb.begin(), wb.end());
  CHECK(v.to_vector<float>() == want);
  (v * tensor(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8})).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{7, 8});
  Tensor flat = arange(8).to(kFloat32);
  nn::utils::vector_to_parameters(flat, {w, b});
  CHECK(w.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(b.to_vector<float>() == std::vector<float>{6, 7});
  CHECK(w.requires_grad());
  {  // the parameters now view the vector's storage, as PyTorch's param.data = vec[a:b]
    NoGradGuard no_grad;
    flat.fill_(1.0);
  }
  CHECK(b.to_vector<float>() == std::vector<float>{1, 1});
  expect_error("vector_to_parameters size", [&] { nn::utils::vector_to_parameters(zeros({7}), {w, b}); },
               {"vector_to_parameters", "8", "[7]"});
  expect_error("parameters_to_vector empty", [] { nn::utils::parameters_to_vector({}); }, {"parameters_to_vector"});
}

TEST_CASE("bad input: indices out of range, dtypes, shapes and names, each error naming the op") {
  const Tensor a = randn({3, 4}), i = tensor(std::vector<int64_t>{0, 7}, {1, 2});
  expect_error("scatter index", [&] { scatter(a, 1, i, randn({1, 2})); }, {"scatter_", "7", "size 4"});
  expect_error("scatter_reduce index", [&] { scatter_reduce(a, 1, i, randn({1, 2}), "amax"); },
               {"scatter_reduce_", "7", "size 4"});
  expect_error("scatter dtype", [&] { scatter(a, 1, tensor(std::vector<int64_t>{0}, {1, 1}), randn({1, 1}, kFloat64)); },
               {"scatter", "self.dtype", "src.dtype"});
  expect_error("scatter index dtype", [&] { scatter(a, 0, zeros({1, 1}), 1.0); }, {"scatter", "int64", "float32"});
  expect_error("scatter index larger", [&] { scatter(a, 0, zeros({1, 5}, kInt64), randn({1, 5})); },
               {"scatter_", "[1, 5]", "[3, 4]"});
  expect_error("scatter source smaller", [&] { scatter(a, 0, zeros({2, 2}, kInt64), randn({1, 2})); },
               {"scatter_", "[2, 2]", "[1, 2]"});
  expect_error("scatter dim", [&] { scatter(a, 2, zeros({1, 1}, kInt64), 0.0); }, {"scatter_", "2"});
  expect_error("scatter_reduce name", [&] { scatter_reduce(a, 0, zeros({1, 1}, kInt64), randn({1, 1}), "max"); },
               {"scatter_reduce", "sum, prod, mean, amax or amin", "max"});
  expect_error("scatter reduce name", [&] { scatter(a, 0, zeros({1, 1}, kInt64), 1.0, "mean"); },
               {"scatter", "add or multiply", "mean"});
  Tensor leaf = randn({2, 2}).set_requires_grad();
  expect_error("scatter_ on a leaf", [&] { leaf.scatter_(0, zeros({1, 1}, kInt64), 1.0); }, {"scatter_", "leaf"});
  const Tensor rows = tensor(std::vector<int64_t>{0, 3});
  expect_error("index_put range", [&] { index_put(a, {rows}, randn({2, 4})); },
               {"index_put", "index 3 is out of bounds for dimension 0 with size 3"});
  expect_error("index_put dtype", [&] { a.clone().index_put_({tensor(std::vector<int64_t>{0, 1})}, randn({4}, kFloat64)); },
               {"index_put_", "dtypes match", "float32", "float64"});
  expect_error("index_put values shape", [&] { index_put(a, {tensor(std::vector<int64_t>{0, 1})}, randn({3})); },
               {"index_put", "[3]", "[2, 4]"});
  expect_error("index_put mask shape", [&] { index_put(a, {ones({4}, kBool)}, randn({1})); },
               {"index_put", "mask", "[4]", "[3, 4]"});
  expect_error("index_put too many", [&] { index_put(a, {rows, rows, rows}, randn({1})); },
               {"index_put", "too many indices", "2"});
  expect_error("index_put index dtype", [&] { index_put(a, {zeros({2})}, randn({1})); }, {"index_put", "float32"});
  expect_error("index_put_ mixed", [&] { a.clone().index_put_({Slice(), rows}, 0.0); }, {"index_put_", "mixed"});
  expect_error("masked_select mask dtype", [&] { masked_select(a, a); }, {"masked_select", "Bool", "float32"});
  expect_error("masked_select shapes", [&] { masked_select(a, ones({3}, kBool)); }, {"masked_select", "[3, 4]", "[3]"});
  expect_error("masked_scatter source", [&] { masked_scatter(a, ones({3, 4}, kBool), randn({5})); },
               {"masked_scatter", "5 < 12"});
  expect_error("bincount negative", [] { bincount(tensor(std::vector<int64_t>{1, -2})); }, {"bincount", "-2"});
  expect_error("bincount 2-D", [] { bincount(zeros({2, 2}, kInt64)); }, {"bincount", "[2, 2]"});
  expect_error("bincount weights", [] { bincount(zeros({3}, kInt64), randn({2})); }, {"bincount", "[2]", "[3]"});
  expect_error("histc bins", [&] { histc(a, 0); }, {"histc", "bins"});
  expect_error("histc dtype", [] { histc(zeros({3}, kInt64)); }, {"histc", "int64"});
  expect_error("unique_consecutive dim", [&] { unique_consecutive(a, false, false, 0); }, {"unique_consecutive", "dim"});
  expect_error("clamp_min shapes", [&] { clamp_min(a, randn({3})); }, {"clamp_min", "[3, 4]", "[3]"});
}
