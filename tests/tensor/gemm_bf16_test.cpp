// The bfloat16 GEMM (cpu::gemm on BFloat16 operands, float32 accumulation, C float32 or bfloat16)
// against a float64 product of the same bfloat16 values: every transpose, odd sizes, leading
// dimensions wider than the matrices (padding NaN, so reading it shows), alpha and beta, several depth
// blocks, threads, bad arguments. Then matmul, batched matmul and linear on bfloat16 tensors against
// float32 on the same values, and linear's gradients in bfloat16. gemm_bf16_fallback_test runs all of it
// with LOCKSTEP_CPU_ISA=avx512, on the float32 fallback a processor without AVX512-BF16 takes.
#include <array>
#include <cmath>
#include <cstdlib>
#include <doctest/doctest.h>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_bf16.h"
#include "tensor/cpu/isa.h"
#include "tensor/dtype.h"
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
  float alpha = 1, beta = 0;
};

struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

const BFloat16 kNaN16 = BFloat16(std::numeric_limits<float>::quiet_NaN());

// Runs the case with C of type TC and checks every element against the float64 product of the
// bfloat16 inputs: within float32 accumulation error, plus bfloat16 C's one rounding (half an ulp,
// 2^-9 relative). C's padding must stay NaN.
// A one-thread bfloat16 kernel (tensor/cpu/gemm_bf16.h) called in place of cpu::gemm.
template <typename TC>
using Kernel = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t, const BFloat16*, int64_t,
                        float, TC*, int64_t);

template <typename TC>
void check_case(const Case& t, uint32_t seed = 1, Kernel<TC> kernel = nullptr) {
  CAPTURE(t.ta);
  CAPTURE(t.tb);
  CAPTURE(t.m);
  CAPTURE(t.n);
  CAPTURE(t.k);
  CAPTURE(t.pad_a);
  CAPTURE(t.alpha);
  CAPTURE(t.beta);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t a_rows = t.ta ? t.k : t.m, a_cols = t.ta ? t.m : t.k;
  const int64_t b_rows = t.tb ? t.n : t.k, b_cols = t.tb ? t.k : t.n;
  const int64_t lda = a_cols + t.pad_a, ldb = b_cols + t.pad_b, ldc = t.n + t.pad_c;
  auto fill = [&](auto& v, int64_t rows, int64_t cols, int64_t ld, auto nan, bool values) {
    v.assign(std::max<int64_t>(rows * ld, 1), nan);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) v[i * ld + j] = values ? decltype(nan)(u(rng)) : nan;
  };
  std::vector<BFloat16> a, b;
  std::vector<TC> c;
  fill(a, a_rows, a_cols, lda, kNaN16, true);
  fill(b, b_rows, b_cols, ldb, kNaN16, true);
  fill(c, t.m, t.n, ldc, TC(std::numeric_limits<float>::quiet_NaN()), t.beta != 0);
  const std::vector<TC> c0 = c;
  if (kernel) kernel(t.ta, t.tb, t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta, c.data(), ldc);
  else cpu::gemm(t.ta, t.tb, t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta, c.data(), ldc);
  const bool bf16_out = std::is_same_v<TC, BFloat16>;
  int bad = 0;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < t.n; ++j) {
      double want = 0, scale = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        const double x = float(a[t.ta ? p * lda + i : i * lda + p]), y = float(b[t.tb ? j * ldb + p : p * ldb + j]);
        want += x * y;
        scale += std::abs(x * y);
      }
      want *= t.alpha;
      scale *= std::abs(t.alpha);
      if (t.beta != 0) {
        want += t.beta * double(float(c0[i * ldc + j]));
        scale += std::abs(t.beta * double(float(c0[i * ldc + j])));
      }
      const double got = float(c[i * ldc + j]);
      const double tol = (t.k + 4) * std::ldexp(scale + 1e-30, -23) + (bf16_out ? std::ldexp(std::abs(want), -8) : 0);
      if (!(std::abs(got - want) <= tol) && bad++ < 3) FAIL_CHECK("C[", i, ", ", j, "] = ", got, ", expected ", want);
    }
    for (int64_t j = t.n; j < ldc; ++j)
      if (!std::isnan(float(c[i * ldc + j])) && bad++ < 3) FAIL_CHECK("padding C[", i, ", ", j, "] was written");
  }
  CHECK(bad == 0);
}

template <typename TC>
void check_all_transposes(const std::vector<std::array<int64_t, 3>>& shapes,
                          const std::vector<std::pair<float, float>>& scales, int64_t pad, Kernel<TC> kernel = nullptr) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : shapes)
        for (auto [alpha, beta] : scales)
          check_case<TC>({ta, tb, m, n, k, pad, 2 * pad + 1, pad, alpha, beta}, 1, kernel);
}

// The AMX kernel's cases: its tiles' edges (32 rows, 32 columns, 32 depths), in-place and copied A,
// its blocks of rows (128), depths (2048, bfloat16 C through its float32 scratch) and columns (1536).
template <typename TC>
void check_amx_kernel(Kernel<TC> kernel) {
  for (int64_t pad : {0, 3})
    check_all_transposes<TC>({{1, 1, 1}, {3, 5, 7}, {32, 32, 32}, {45, 37, 83}, {64, 48, 96}, {129, 97, 65}},
                             {{1, 0}, {-0.5f, 0.25f}}, pad, kernel);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_case<TC>({ta, tb, 9, 70, 4097, 1, 2, 1, 1, 0}, 1, kernel);
      check_case<TC>({ta, tb, 64, 40, 2080, 0, 0, 0, 0.5f, 2}, 1, kernel);
      check_case<TC>({ta, tb, 197, 65, 31, 2, 1, 3, 1, 0.5f}, 1, kernel);
    }
  check_case<TC>({false, true, 7, 1601, 40, 0, 0, 1, 1, 0}, 1, kernel);
}

// Tensors [rows, cols] of values already bfloat16 (so float32 and bfloat16 hold the same numbers).
Tensor bf16_values(const Shape& shape, uint32_t seed) {
  manual_seed(seed);
  return to(to(uniform(shape, -1, 1), kBFloat16), kFloat32);
}

// bfloat16 result vs the float32 product of the same values: one bfloat16 rounding apart at most
// (half an ulp of the result), plus float32 accumulation error; `inner` (defined: an intermediate
// result rounded to bfloat16 too, as linear's product before its bias add) adds half an ulp of it.
void check_close_to_float(const Tensor& got_bf16, const Tensor& want_f32, int64_t k, const Tensor& inner = Tensor()) {
  REQUIRE(got_bf16.dtype() == kBFloat16);
  REQUIRE(got_bf16.shape() == want_f32.shape());
  Tensor got = contiguous(to(got_bf16, kFloat64)), want = contiguous(to(want_f32, kFloat64));
  Tensor mid = inner.defined() ? contiguous(to(inner, kFloat64)) : zeros(want.shape(), kFloat64);
  const double* g = got.data<double>();
  const double* w = want.data<double>();
  const double* r = mid.data<double>();
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (!(std::abs(g[i] - w[i]) <= std::ldexp(std::abs(w[i]) + std::abs(r[i]), -8) + k * 1e-6) && bad++ < 3)
      FAIL_CHECK("element ", i, " = ", g[i], ", expected ", w[i]);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("bfloat16 gemm: the kernel that runs") {
  // LOCKSTEP_CPU_ISA=avx512 (gemm_bf16_fallback_test) must take the float32 fallback.
  const char* isa = std::getenv("LOCKSTEP_CPU_ISA");
  if (isa && (std::string(isa) == "avx512" || std::string(isa) == "avx2")) CHECK_FALSE(cpu::use_avx512_bf16());
  if (!cpu::use_avx512_bf16()) CHECK_FALSE(cpu::use_amx_bf16());
  const std::string kernel = cpu::use_amx_bf16()      ? "AMX (where its check product agrees), else AVX512-BF16"
                             : cpu::use_avx512_bf16() ? "AVX512-BF16"
                                                      : "float32 fallback";
  MESSAGE(kernel);
}

// The AMX kernel's blocking, packing and edges with its tile instructions done in C++: runs on any
// processor with AVX512-BF16 (its packing and stores use it).
TEST_CASE_TEMPLATE("bfloat16 gemm: the AMX kernel on emulated tiles", TC, float, BFloat16) {
  if (!cpu::use_avx512_bf16()) {
    MESSAGE("no AVX512-BF16: skipped");
    return;
  }
  check_amx_kernel<TC>(cpu::amx_bf16::gemm_bf16_emulated);
}

// The AMX kernel itself, where the processor has AMX and Linux grants the tiles.
TEST_CASE_TEMPLATE("bfloat16 gemm: the AMX kernel", TC, float, BFloat16) {
  if (!cpu::use_amx_bf16()) {
    MESSAGE("no AMX-BF16 here: skipped");
    return;
  }
  check_amx_kernel<TC>(cpu::amx_bf16::gemm_bf16);
}

TEST_CASE_TEMPLATE("bfloat16 gemm: every transpose, odd sizes, padded leading dimensions, alpha and beta", TC, float,
                   BFloat16) {
  ThreadsGuard guard;
  set_num_threads(1);
  for (int64_t pad : {0, 3})
    check_all_transposes<TC>({{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {33, 65, 2}, {7, 64, 16}, {13, 1, 257}},
                             {{1, 0}, {1, 1}, {-0.5f, 0.25f}, {2, 0}}, pad);
}

// Several depth blocks of the AVX512-BF16 kernel (2048) with an odd last one, bfloat16 C through its
// float32 scratch; rows past one block of rows (96), columns past one block of columns (1536) and not
// a whole number of 64-column panels.
TEST_CASE_TEMPLATE("bfloat16 gemm: depth, row and column blocks", TC, float, BFloat16) {
  ThreadsGuard guard;
  set_num_threads(1);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_case<TC>({ta, tb, 9, 70, 4097, 1, 2, 1, 1, 0});
      check_case<TC>({ta, tb, 5, 23, 2049, 0, 0, 0, 0.5f, 2});
      check_case<TC>({ta, tb, 197, 65, 31, 2, 1, 3, 1, 0.5f});
    }
  check_case<TC>({false, true, 7, 1601, 40, 0, 0, 1, 1, 0});
  check_case<TC>({true, false, 8, 1700, 3, 1, 1, 0, -1, 1});
}

TEST_CASE_TEMPLATE("bfloat16 gemm: several threads agree with the float64 product", TC, float, BFloat16) {
  ThreadsGuard guard;
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    CAPTURE(threads);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_case<TC>({ta, tb, 203, 150, 301, 1, 0, 5, 1, 0}, 7);
        check_case<TC>({ta, tb, 70, 333, 257, 0, 2, 0, 0.5f, 1}, 7);
      }
  }
}

TEST_CASE("bfloat16 gemm: exact small values; beta 0 overwrites NaN; k == 0 scales C") {
  // A = [[1, 2], [3, 4]], B = [[0.5, 1], [-1, 2]]: A @ B = [[-1.5, 5], [-2.5, 11]].
  std::vector<BFloat16> a{1.f, 2.f, 3.f, 4.f}, b{0.5f, 1.f, -1.f, 2.f};
  std::vector<float> c(4, std::numeric_limits<float>::quiet_NaN());
  cpu::gemm(false, false, 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2);
  CHECK(c == std::vector<float>{-1.5f, 5.f, -2.5f, 11.f});
  std::vector<BFloat16> cb(4, kNaN16);
  cpu::gemm(true, false, 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, cb.data(), 2);  // A^T @ B
  CHECK(std::vector<float>(cb.begin(), cb.end()) == std::vector<float>{-2.5f, 7.f, -3.f, 10.f});
  cpu::gemm(false, true, 2, 2, 2, 2.f, a.data(), 2, b.data(), 2, 1.f, cb.data(), 2);  // += 2 A @ B^T
  CHECK(std::vector<float>(cb.begin(), cb.end()) == std::vector<float>{2.5f, 13.f, 8.f, 20.f});
  // 1 + 255 * 2^-9 = 1.498: float32 accumulation keeps every 2^-9 and rounds once, to 1.5; a bfloat16
  // running sum (8 significant bits) would drop each of them and stay at 1.
  std::vector<BFloat16> row(256, BFloat16(std::ldexp(1.f, -9))), ones(256, 1.f);
  row[0] = 1.f;
  BFloat16 one_c;
  cpu::gemm(false, false, 1, 1, 256, 1.f, row.data(), 256, ones.data(), 1, 0.f, &one_c, 1);
  CHECK(float(one_c) == 1.5f);
  // k == 0: C = beta * C (beta 0 clears NaN).
  std::vector<BFloat16> c3{1.f, 2.f, kNaN16, 4.f};
  cpu::gemm(false, false, 2, 2, 0, 1.f, a.data(), 1, b.data(), 2, 0.f, c3.data(), 2);
  CHECK(std::vector<float>(c3.begin(), c3.end()) == std::vector<float>{0, 0, 0, 0});
  std::vector<float> c4{1, 2, 3, 4};
  cpu::gemm(false, false, 2, 2, 0, 1.f, a.data(), 1, b.data(), 2, 3.f, c4.data(), 2);
  CHECK(c4 == std::vector<float>{3, 6, 9, 12});
}

TEST_CASE("bfloat16 gemm: bad sizes and leading dimensions are rejected, naming them") {
  std::vector<BFloat16> a(100), b(100), c(100);
  auto call = [&](bool ta, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    return error_of([&] { cpu::gemm(ta, false, m, n, k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), ldc); });
  };
  CHECK(contains(call(false, -1, 2, 2, 2, 2, 2), "gemm: negative size m=-1"));
  CHECK(contains(call(false, 4, 3, 5, 4, 3, 3), "gemm: lda=4 is below the row length 5 of A ([m, k]"));
  CHECK(contains(call(true, 4, 3, 5, 3, 3, 3), "gemm: lda=3 is below the row length 4 of A ([k, m]"));
  CHECK(contains(call(false, 4, 3, 5, 5, 3, 2), "gemm: ldc=2 is below the row length n=3 of C"));
}

TEST_CASE("matmul on bfloat16 tensors: bfloat16 results equal to float32's on the same values, rounded") {
  // 2-D (and transposed views, read in place), batched, batch broadcast, 3-D @ 2-D, 1-D operands.
  Tensor a = bf16_values({37, 70}, 1), b = bf16_values({70, 45}, 2);
  check_close_to_float(matmul(to(a, kBFloat16), to(b, kBFloat16)), matmul(a, b), 70);
  Tensor at = transpose(bf16_values({70, 37}, 3), 0, 1), bt = transpose(bf16_values({45, 70}, 4), 0, 1);
  check_close_to_float(matmul(to(at, kBFloat16), to(bt, kBFloat16)), matmul(at, bt), 70);
  Tensor x = bf16_values({3, 4, 17, 33}, 5), y = bf16_values({4, 33, 9}, 6);
  check_close_to_float(matmul(to(x, kBFloat16), to(y, kBFloat16)), matmul(x, y), 33);
  Tensor w = bf16_values({33, 20}, 7);
  check_close_to_float(matmul(to(x, kBFloat16), to(w, kBFloat16)), matmul(x, w), 33);
  Tensor v = bf16_values({33}, 8);
  check_close_to_float(matmul(to(x, kBFloat16), to(v, kBFloat16)), matmul(x, v), 33);
  // Mixed dtypes stay an error naming both.
  CHECK(contains(error_of([&] { matmul(to(a, kBFloat16), b); }), "matmul: dtypes differ: bfloat16 and float32"));
}

TEST_CASE("linear on bfloat16: forward and gradients against float32 on the same values") {
  Tensor x = bf16_values({2, 5, 40}, 11), w = bf16_values({24, 40}, 12), bias = bf16_values({24}, 13);
  Tensor g = bf16_values({2, 5, 24}, 14);
  // float32 reference, with the bfloat16 output's rounding of the product (before the bias add).
  Tensor xf = x.detach().requires_grad_(), wf = w.detach().requires_grad_(), bf = bias.detach().requires_grad_();
  Tensor yf = linear(xf, wf, bf);
  sum(yf * g).backward();
  Tensor xb = to(x, kBFloat16).detach().requires_grad_(), wb = to(w, kBFloat16).detach().requires_grad_();
  Tensor bb = to(bias, kBFloat16).detach().requires_grad_();
  Tensor yb = linear(xb, wb, bb);
  CHECK(yb.dtype() == kBFloat16);
  // The product and the bias add each round to bfloat16: two roundings.
  check_close_to_float(yb, yf.detach(), 40, matmul(x, transpose(w, 0, 1)));
  sum(to(yb, kFloat32) * g).backward();
  REQUIRE(xb.grad().defined());
  REQUIRE(wb.grad().defined());
  REQUIRE(bb.grad().defined());
  CHECK(xb.grad().dtype() == kBFloat16);
  CHECK(wb.grad().dtype() == kBFloat16);
  check_close_to_float(xb.grad(), xf.grad(), 24);
  check_close_to_float(wb.grad(), wf.grad(), 10);
  check_close_to_float(bb.grad(), bf.grad(), 10);
}
