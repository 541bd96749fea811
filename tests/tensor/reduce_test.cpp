// The reduction table (tensor/reduce_ops.h) on the CPU: prod's values and gradient (PyTorch's rule for
// zeros), the NaN rule on both kernel layouts, and the accumulation rule on long, badly scaled float32
// inputs, checked against a float64 (long double) reference: double accumulation rounded once is
// within one float32 ulp of the exact sum, better than PyTorch's float32 cascade sum.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/api.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

namespace {

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;
using V = const std::vector<Tensor>&;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> values_of(const Tensor& t) {
  Tensor c = to(t.contiguous(), kFloat64);
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// 10^7 positive float32 values spread over 1e-4 .. 1e4 (log-uniform): long and badly scaled.
Tensor badly_scaled(const Shape& s) {
  manual_seed(7);
  return to(exp(uniform(s, std::log(1e-4), std::log(1e4), kFloat64)), kFloat32);
}

// sum (or mean) of x [outer, n, inner] over n, per output, in long double.
std::vector<long double> reference(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool mean) {
  std::vector<long double> r(outer * inner, 0.0L);
  const float* p = x.data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i) r[o * inner + i] += p[(o * n + k) * inner + i];
  if (mean)
    for (auto& v : r) v /= n;
  return r;
}

// Every output within one float32 ulp of the reference (the reference rounded to float is within half).
void check_within_ulp(const Tensor& got, const std::vector<long double>& ref) {
  REQUIRE(got.dtype() == kFloat32);
  REQUIRE(got.numel() == int64_t(ref.size()));
  const float* g = got.contiguous().data<float>();
  int64_t worst = 0;
  double worst_ulps = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = static_cast<float>(ref[i]);
    const double ulp = std::nextafter(r, std::numeric_limits<float>::infinity()) - r;
    const double ulps = std::fabs(double(g[i]) - double(ref[i])) / ulp;
    if (ulps > worst_ulps) worst_ulps = ulps, worst = int64_t(i);
  }
  INFO("worst output ", worst, ": ", g[worst], " vs ", double(ref[worst]), " (", worst_ulps, " ulp)");
  CHECK(worst_ulps <= 1.0);
}

}  // namespace

TEST_CASE("prod: values worked out by hand, every layout and dtype") {
  Tensor a = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  CHECK(prod(a).item<double>() == 720.0);
  CHECK(values_of(prod(a, 0)) == std::vector<double>{4, 10, 18});
  CHECK(values_of(prod(a, 1)) == std::vector<double>{6, 120});
  CHECK(prod(a, 1, true).shape() == Shape{2, 1});
  CHECK(a.prod(-1).shape() == Shape{2});
  CHECK(prod(tensor({2L, 3L, 4L})).item<int64_t>() == 24);
  Tensor b = tensor({1.0, 0.0, 1.0}) != 0.0;  // bool: the product is int64, as PyTorch
  CHECK(prod(b).dtype() == kInt64);
  CHECK(prod(b).item<int64_t>() == 0);
  CHECK(prod(zeros({0})).item<double>() == 1.0);  // empty product
  CHECK(values_of(prod(zeros({2, 0}), 1)) == std::vector<double>{1, 1});
  CHECK(prod(to(a, kFloat32)).item<float>() == 720.0f);
  CHECK(to(prod(to(a, kBFloat16)), kFloat32).item<float>() == 720.0f);
  // A product of int64s wraps as two's complement (2^62 * 4 = 2^64 = 0 mod 2^64), no overflow trap.
  CHECK(prod(tensor({int64_t(1) << 62, 4L})).item<int64_t>() == 0);
}

TEST_CASE("prod: gradient with and without zeros, as PyTorch") {
  auto grad_of = [](const Tensor& x) {
    Tensor v = x.detach().requires_grad_(true);
    prod(v).backward();
    return values_of(v.grad());
  };
  CHECK(grad_of(tensor({2.0, 3.0, 4.0})) == std::vector<double>{12, 8, 6});
  CHECK(grad_of(tensor({2.0, 0.0, 3.0})) == std::vector<double>{0, 6, 0});  // one zero: the others' product
  CHECK(grad_of(tensor({0.0, 2.0, 0.0})) == std::vector<double>{0, 0, 0});  // two zeros: zero gradient
  // Along a dimension, each slice by its own count of zeros: [[0, 2, 3], [0, 0, 5], [1, 2, 3]].
  Tensor x = tensor({0.0, 2.0, 3.0, 0.0, 0.0, 5.0, 1.0, 2.0, 3.0}, {3, 3}).requires_grad_(true);
  sum(prod(x, 1)).backward();
  CHECK(values_of(x.grad()) == std::vector<double>{6, 0, 0, 0, 0, 0, 6, 3, 2});
}

TEST_CASE("prod: gradcheck in float64, with and without zeros") {
  auto r = [](const Shape& s) { return randn(s, kFloat64); };
  testing::gradcheck([](V x) { return prod(x[0]); }, {r({2, 3})});
  testing::gradcheck([](V x) { return prod(x[0], 1); }, {r({2, 3, 4})});
  testing::gradcheck([](V x) { return prod(x[0], 0, true); }, {r({3, 4})});
  testing::gradcheck([](V x) { return prod(x[0], -1); }, {r({5})});
  // Zeros: one in a slice, two in another, none in the third.
  Tensor z = tensor({0.0, 1.5, -2.0, 0.0, 0.0, 0.5, 1.25, -0.75, 2.0}, {3, 3});
  testing::gradcheck([](V x) { return prod(x[0], 1); }, {z});
  testing::gradcheck([](V x) { return prod(x[0], 0); }, {z});
  testing::gradcheck([](V x) { return prod(x[0]); }, {tensor({0.5, 0.0, 2.0, -1.5})});
  testing::gradcheck([](V x) { return prod(x[0]); }, {tensor({0.5, 0.0, 2.0, 0.0})});
}

TEST_CASE("prod: bad input names the op") {
  CHECK(contains(error_of([] { prod(Tensor()); }), "prod"));
  CHECK(contains(error_of([] { prod(zeros({2, 3}), 2); }), "prod"));
}

TEST_CASE("NaN rule: max/min propagate NaN, argmax/argmin give the first NaN, on both layouts") {
  // Rows (inner == 1) and columns (inner > 1) of the same values.
  Tensor rows = tensor({1.0, kNaN, 5.0, kNaN, 3.0, 3.0, 1.0, 1.0}, {2, 4});
  Tensor cols = rows.t().contiguous();  // [4, 2]: reduce over dim 0
  for (auto [x, d] : {std::pair{rows, int64_t(1)}, std::pair{cols, int64_t(0)}}) {
    auto [mx, imx] = max(x, d);
    auto [mn, imn] = min(x, d);
    std::vector<double> m = values_of(mx);
    CHECK(std::isnan(m[0]));
    CHECK(m[1] == 3.0);
    CHECK(std::isnan(values_of(mn)[0]));
    CHECK(values_of(mn)[1] == 1.0);
    CHECK(values_of(imx) == std::vector<double>{1, 0});  // first NaN; first of the tied 3s
    CHECK(values_of(imn) == std::vector<double>{1, 2});  // first NaN; first of the tied 1s
    CHECK(values_of(argmax(x, d)) == std::vector<double>{1, 0});
    CHECK(values_of(argmin(x, d)) == std::vector<double>{1, 2});
  }
}

TEST_CASE("accumulation: 10^7 badly scaled float32 values sum within one ulp of float64, every layout") {
  const int64_t kN = 10'000'000;
  Tensor x = badly_scaled({kN});
  SUBCASE("all elements (inner == 1, one output)") {
    check_within_ulp(sum(x), reference(x, 1, kN, 1, false));
    check_within_ulp(mean(x), reference(x, 1, kN, 1, true));
  }
  SUBCASE("along rows: [10, 10^6] over dim 1 (inner == 1)") {
    Tensor m = x.view({10, kN / 10});
    check_within_ulp(sum(m, 1), reference(m, 10, kN / 10, 1, false));
    check_within_ulp(mean(m, 1), reference(m, 10, kN / 10, 1, true));
  }
  SUBCASE("along columns: [10^4, 1000] over dim 0 (inner > 1)") {
    Tensor m = x.view({10'000, 1000});
    check_within_ulp(sum(m, 0), reference(m, 1, 10'000, 1000, false));
    check_within_ulp(mean(m, 0), reference(m, 1, 10'000, 1000, true));
  }
  SUBCASE("middle dimension: [10, 10^5, 10] over dim 1 (inner > 1)") {
    Tensor m = x.view({10, 100'000, 10});
    check_within_ulp(sum(m, 1), reference(m, 10, 100'000, 10, false));
    check_within_ulp(mean(m, 1), reference(m, 10, 100'000, 10, true));
  }
}

TEST_CASE("accumulation: a float32 product accumulates in double, in both layouts") {
  // 64 factors of 1 + 2^-20: each rounded float product would drift; double holds it exactly enough.
  Tensor x = full({64, 3}, 1.0 + std::ldexp(1.0, -20), kFloat32);
  const float expect = static_cast<float>(std::pow(1.0L + std::ldexp(1.0L, -20), 64));
  const Tensor cols = prod(x, 0);
  for (int64_t i = 0; i < 3; ++i) CHECK(cols.data<float>()[i] == expect);
  CHECK(prod(x.t().contiguous(), 1).data<float>()[0] == expect);
}

TEST_CASE("LibTorch's spellings: norm over one integer dimension, argmax and argmin without one") {
  Tensor x = tensor({3.0, 4.0, 0.0, -2.0}, {2, 2});
  CHECK(values_of(x.norm(2, 1)) == std::vector<double>{5.0, 2.0});
  CHECK(values_of(x.norm(1, 0, true)) == std::vector<double>{3.0, 6.0});
  CHECK(x.argmax().item<int64_t>() == 1);
  CHECK(x.argmin().item<int64_t>() == 3);
  CHECK(x.argmax().dim() == 0);
}
