// cpu::gemm's BLAS-style interface against a naive triple loop in double: every transpose, leading
// dimensions wider than the matrices (padding filled with NaN, so reading it shows), alpha and
// beta (beta == 0 over a C full of NaN), one thread and several, and bad arguments.
#include "tensor/cpu/gemm.h"

#include <array>
#include <cmath>
#include <doctest/doctest.h>
#include <limits>
#include <random>
#include <vector>

#include "tensor/parallel.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;

namespace {

struct Case {
  bool ta, tb;
  int64_t m, n, k;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // leading dimension minus the row length
  double alpha = 1, beta = 0;
};

template <typename T>
struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<T> a, b, c;
};

// Random A, B and C stored as the case says; padding and (when beta == 0) C hold NaN.
template <typename T>
Operands<T> make(const Case& t, uint32_t seed) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Operands<T> o;
  int64_t a_rows = t.ta ? t.k : t.m, a_cols = t.ta ? t.m : t.k;
  int64_t b_rows = t.tb ? t.n : t.k, b_cols = t.tb ? t.k : t.n;
  o.lda = a_cols + t.pad_a;
  o.ldb = b_cols + t.pad_b;
  o.ldc = t.n + t.pad_c;
  auto fill = [&](std::vector<T>& v, int64_t rows, int64_t cols, int64_t ld, bool values) {
    v.assign(std::max<int64_t>(rows * ld, 1), nan);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) v[i * ld + j] = values ? T(u(rng)) : nan;
  };
  fill(o.a, a_rows, a_cols, o.lda, true);
  fill(o.b, b_rows, b_cols, o.ldb, true);
  fill(o.c, t.m, t.n, o.ldc, t.beta != 0);
  return o;
}

// Runs gemm on the case and compares with the naive loop; padding of C must be untouched (NaN).
template <typename T>
void check_case(const Case& t, uint32_t seed = 1) {
  CAPTURE(t.ta);
  CAPTURE(t.tb);
  CAPTURE(t.m);
  CAPTURE(t.n);
  CAPTURE(t.k);
  CAPTURE(t.pad_a);
  CAPTURE(t.pad_b);
  CAPTURE(t.pad_c);
  CAPTURE(t.alpha);
  CAPTURE(t.beta);
  Operands<T> o = make<T>(t, seed);
  std::vector<T> c0 = o.c;
  cpu::gemm(t.ta, t.tb, t.m, t.n, t.k, T(t.alpha), o.a.data(), o.lda, o.b.data(), o.ldb, T(t.beta), o.c.data(), o.ldc);
  const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  int bad = 0;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < t.n; ++j) {
      double want = 0, scale = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        double x = o.a[t.ta ? p * o.lda + i : i * o.lda + p];
        double y = o.b[t.tb ? j * o.ldb + p : p * o.ldb + j];
        want += x * y;
        scale += std::abs(x * y);
      }
      want *= t.alpha;
      if (t.beta != 0) want += t.beta * double(c0[i * o.ldc + j]);
      double got = o.c[i * o.ldc + j];
      if (!(std::abs(got - want) <= 4 * eps * (std::abs(t.alpha) * scale + 1) * (t.k + 2)) && bad++ < 3)
        FAIL_CHECK("C[", i, ", ", j, "] = ", got, ", expected ", want);
    }
    for (int64_t j = t.n; j < o.ldc; ++j)
      if (!std::isnan(o.c[i * o.ldc + j]) && bad++ < 3) FAIL_CHECK("padding C[", i, ", ", j, "] was written");
  }
  CHECK(bad == 0);
}

struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

// Every transpose of each [m, n, k] in `shapes` with each (alpha, beta), on one thread, with padded
// leading dimensions (1, 3, 2).
template <typename T>
void check_shapes(const std::vector<std::array<int64_t, 3>>& shapes,
                  const std::vector<std::pair<double, double>>& scales) {
  ThreadsGuard guard;
  set_num_threads(1);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : shapes)
        for (auto [alpha, beta] : scales) check_case<T>({ta, tb, m, n, k, 1, 3, 2, alpha, beta});
}

}  // namespace

TEST_CASE_TEMPLATE("gemm: every transpose, padded leading dimensions, alpha and beta", T, float, double) {
  ThreadsGuard guard;
  set_num_threads(1);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {64, 48, 20}})
        for (int64_t pad : {0, 3})
          for (auto [alpha, beta] : std::vector<std::pair<double, double>>{{1, 0}, {1, 1}, {-0.5, 0.25}, {2, 0}})
            check_case<T>({ta, tb, m, n, k, pad, 2 * pad, pad + 1, alpha, beta});
}

// Products small enough for small_gemm (no packing), whose column count is a whole number of vectors:
// every column-block width (1-4 vectors of 8 or 16), leftover rows, transposes, leading dimensions.
TEST_CASE_TEMPLATE("gemm: small products, every block width and leftover rows", T, float, double) {
  check_shapes<T>({{64, 64, 32}, {64, 32, 64}, {7, 16, 9}, {5, 48, 40}, {13, 80, 16}, {3, 112, 5}, {1, 8, 1}},
                  {{1, 0}, {-0.5, 0.25}});
}

// float32 products for blocked_gemm (C 32-2048 columns wide, at least 16 rows): several depth blocks
// (k > 128, beta applied by the first alone), rows not a whole number of tiles (6), columns not a whole
// number of panels (64) nor of 8 (the transposed packing's edge), transposes and leading dimensions.
TEST_CASE_TEMPLATE("gemm: blocked products, depth blocks and ragged tiles", T, float, double) {
  check_shapes<T>({{100, 200, 300}, {17, 33, 129}, {64, 128, 256}, {45, 70, 9}, {16, 2048, 3}, {31, 77, 1}},
                  {{1, 0}, {-0.5, 0.25}, {1, 1}});
}

TEST_CASE_TEMPLATE("gemm: beta 0 overwrites a C full of NaN; beta 1 accumulates", T, float, double) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // A = [[1, 2], [3, 4]], B = I: C = A.
  std::vector<T> a{1, 2, 3, 4}, b{1, 0, 0, 1}, c(4, nan);
  cpu::gemm(false, false, 2, 2, 2, T(1), a.data(), 2, b.data(), 2, T(0), c.data(), 2);
  CHECK(c == std::vector<T>{1, 2, 3, 4});
  cpu::gemm(false, false, 2, 2, 2, T(1), a.data(), 2, b.data(), 2, T(1), c.data(), 2);
  CHECK(c == std::vector<T>{2, 4, 6, 8});
  cpu::gemm(true, false, 2, 2, 2, T(1), a.data(), 2, b.data(), 2, T(1), c.data(), 2);  // += A^T
  CHECK(c == std::vector<T>{3, 7, 8, 12});
  // k == 0: C = beta * C, and with beta == 0 the NaN goes.
  std::vector<T> c2(4, nan);
  cpu::gemm(false, false, 2, 2, 0, T(1), a.data(), 1, b.data(), 2, T(0), c2.data(), 2);
  CHECK(c2 == std::vector<T>{0, 0, 0, 0});
  std::vector<T> c3{1, 2, 3, 4};
  cpu::gemm(false, false, 2, 2, 0, T(1), a.data(), 1, b.data(), 2, T(3), c3.data(), 2);
  CHECK(c3 == std::vector<T>{3, 6, 9, 12});
}

TEST_CASE_TEMPLATE("gemm: one thread and several agree with the naive loop", T, float, double) {
  ThreadsGuard guard;
  // Large enough to be split: by rows (m >= n) and by columns (n > m), with ragged edges.
  std::vector<Case> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({ta, tb, 203, 150, 301, 1, 0, 5, 1, 0});
      cases.push_back({ta, tb, 70, 333, 257, 0, 2, 0, 0.5, 1});
    }
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CAPTURE(threads);
    for (const Case& t : cases) check_case<T>(t, 7);
  }
}

TEST_CASE("gemm: two threads agree with one, split by rows or by columns") {
  ThreadsGuard guard;
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{256, 128}, {128, 512}}) {
    Case t{false, true, m, n, 384};
    Operands<float> o = make<float>(t, 3);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      std::vector<float> c(m * n, 0.f);
      cpu::gemm(t.ta, t.tb, m, n, t.k, 1.f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, c.data(), n);
      results.push_back(c);
    }
    // Within tolerance; each block is an ordinary Eigen product, usually bit-identical.
    double worst = 0;
    for (size_t i = 0; i < results[0].size(); ++i) worst = std::max(worst, double(std::abs(results[0][i] - results[1][i])));
    CHECK(worst <= 1e-4);
  }
}

TEST_CASE("gemm: bad sizes and leading dimensions are rejected, naming them") {
  std::vector<float> a(100), b(100), c(100);
  auto call = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    return error_of([&] { cpu::gemm(ta, tb, m, n, k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), ldc); });
  };
  CHECK(contains(call(false, false, -1, 2, 2, 2, 2, 2), "gemm: negative size m=-1"));
  CHECK(contains(call(false, false, 4, 3, 5, 4, 3, 3), "gemm: lda=4 is below the row length 5 of A ([m, k]"));
  CHECK(contains(call(true, false, 4, 3, 5, 3, 3, 3), "gemm: lda=3 is below the row length 4 of A ([k, m]"));
  CHECK(contains(call(false, true, 4, 3, 5, 5, 4, 3), "gemm: ldb=4 is below the row length 5 of B ([n, k]"));
  CHECK(contains(call(false, false, 4, 3, 5, 5, 2, 3), "gemm: ldb=2 is below the row length 3 of B ([k, n]"));
  CHECK(contains(call(false, false, 4, 3, 5, 5, 3, 2), "gemm: ldc=2 is below the row length n=3 of C"));
  CHECK(call(false, false, 0, 3, 5, 5, 3, 3).empty());  // empty C: nothing to do
}
