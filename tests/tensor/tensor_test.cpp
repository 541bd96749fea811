// Tests of the tensor layer: factories, shapes, raw ops against hand-computed values, GEMM against a
// naive triple loop, and the error for each kind of bad input.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "tensor/api.h"
#include "tensor/cuda/cuda.h"
#include "tensor/philox.h"
#include "tensor/cpu/block_cache.h"
#include "tensor/cpu/cpu.h"
#include "tensor/elementwise_ops.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;

TEST_CASE("arange with a floating bound is float32 (not truncated to int64); linspace, logspace and eye as PyTorch's") {
  Tensor a = arange(0.0, 1.0, 0.3);
  CHECK(a.dtype() == kFloat32);
  CHECK(a.to_vector<float>() == std::vector<float>{0.f, 0.3f, 0.6f, 0.9f});  // 3 * 0.3 in double, then rounded
  CHECK(arange(1, 2.5, 0.5).to_vector<float>() == std::vector<float>{1.f, 1.5f, 2.f});
  CHECK(arange(2, 11, 3).dtype() == kInt64);
  CHECK(arange(2, 11, 3).to_vector<int64_t>() == std::vector<int64_t>{2, 5, 8});
  CHECK(arange(1.0, 0.0, -0.25, kFloat64).to_vector<double>() == std::vector<double>{1.0, 0.75, 0.5, 0.25});
  CHECK(contains(error_of([] { arange(0.0, 1.0, -0.5); }), "arange: upper bound and larger bound inconsistent"));
  CHECK(linspace(0, 1, 5).to_vector<float>() == std::vector<float>{0.f, 0.25f, 0.5f, 0.75f, 1.f});
  // Both ends exact, the middle counted from the nearer end (PyTorch's values).
  CHECK(linspace(-1, 1, 4, kFloat64).to_vector<double>() == std::vector<double>{-1.0, -1.0 + 2.0 / 3, 1.0 - 2.0 / 3, 1.0});
  CHECK(linspace(3, 7, 1).to_vector<float>() == std::vector<float>{3.f});
  CHECK(linspace(3, 7, 0).numel() == 0);
  CHECK(logspace(0, 2, 3).to_vector<float>() == std::vector<float>{1.f, 10.f, 100.f});
  CHECK(logspace(0, 3, 4, 2.0).to_vector<float>() == std::vector<float>{1.f, 2.f, 4.f, 8.f});
  Tensor e = eye(2, 3);
  CHECK(e.shape() == Shape{2, 3});
  CHECK(e.to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0});
  CHECK(eye(3, -1, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 1, 0, 0, 0, 1});
}

TEST_CASE("factories give the requested shape, dtype and values") {
  Tensor z = zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dtype() == kFloat32);
  CHECK(z.device() == Device::cpu());
  CHECK(z.to_vector<float>() == std::vector<float>(6, 0.f));
  CHECK(ones({4}, kFloat64).to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(full({2}, 2.5).to_vector<float>() == std::vector<float>{2.5f, 2.5f});
  CHECK(arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(5).dtype() == kInt64);
  CHECK(arange(1, 8, 3).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 7});
  CHECK(arange(5, 0, -2).to_vector<int64_t>() == std::vector<int64_t>{5, 3, 1});
  Tensor t = tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 3);
  CHECK(t.numel() == 6);
  CHECK(scalar_tensor(3.0).dim() == 0);
  CHECK(scalar_tensor(3.0).item<float>() == 3.f);
  CHECK(empty({0, 5}).numel() == 0);
}

// The questions the ops and layers ask instead of testing the device (tensor/backend.h's Capability).
TEST_CASE("the CPU backend's capabilities and limits") {
  const Device cpu = Device::cpu();
  CHECK(supports(cpu, Capability::kGemm, kBFloat16));
  CHECK_FALSE(supports(cpu, Capability::kGemm, kFloat16));  // float16 products go through float32 copies
  CHECK(supports(cpu, Capability::kMixedWithFloat32, kBFloat16));
  CHECK_FALSE(supports(cpu, Capability::kMixedWithFloat32, kFloat32));
  CHECK(supports(cpu, Capability::kSoftmaxAnyDim, kFloat32));
  CHECK_FALSE(supports(cpu, Capability::kSoftmaxAnyDim, kFloat16));
  CHECK(supports(cpu, Capability::kAvgPool2d, kFloat32));
  CHECK(supports(cpu, Capability::kAvgPool2d, kFloat16));
  CHECK_FALSE(supports(cpu, Capability::kAvgPool2d, kFloat64));
  CHECK(supports(cpu, Capability::kConv2d, kFloat32));
  CHECK_FALSE(supports(cpu, Capability::kConv2d, kFloat64));
  CHECK_FALSE(supports(cpu, Capability::kPhiloxRandom, kFloat32));  // the host generator's stream
  CHECK(supports(cpu, Capability::kHostReadable, kInt64));
  CHECK(backend_for(cpu).limits().attention_head_dim == 0);
  CHECK(backend_for(cpu).limits().im2col_chunk_elements > 0);
}

TEST_CASE("manual_seed makes random draws reproducible") {
  manual_seed(42);
  auto a = randn({100}).to_vector<float>();
  auto u = rand({1000}, kFloat64).to_vector<double>();
  auto r = randint(3, 7, {1000}).to_vector<int64_t>();
  manual_seed(42);
  CHECK(randn({100}).to_vector<float>() == a);
  manual_seed(43);
  CHECK(randn({100}).to_vector<float>() != a);
  double mean = 0;
  for (double x : u) {
    CHECK(x >= 0.0);
    CHECK(x < 1.0);
    mean += x / u.size();
  }
  CHECK(mean == doctest::Approx(0.5).epsilon(0.05));
  for (int64_t x : r) {
    CHECK(x >= 3);
    CHECK(x < 7);
  }
  auto p = randperm(10).to_vector<int64_t>();
  std::sort(p.begin(), p.end());
  CHECK(p == arange(10).to_vector<int64_t>());
}

TEST_CASE("reshape and view share storage; clone copies") {
  Tensor t = arange(6, kFloat32);
  Tensor v = t.detach();
  Tensor r = internal::reshape(t, {2, -1});
  CHECK(r.shape() == Shape{2, 3});
  CHECK(r.data_ptr() == t.data_ptr());
  Tensor c = internal::clone(t);
  CHECK(c.data_ptr() != t.data_ptr());
  internal::fill_(r, 7.0);
  CHECK(t.to_vector<float>() == std::vector<float>(6, 7.f));
  CHECK(c.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(error_of([&] { internal::reshape(t, {4, -1}); }).find("reshape: cannot reshape [6] into [4, -1]") == 0);
  CHECK(error_of([&] { internal::reshape(t, {-1, -1}); }).find("only one dimension can be -1") != std::string::npos);
  CHECK(error_of([&] { internal::reshape(t, {5}); }) == "reshape: cannot reshape [6] (6 elements) into [5]");
}

TEST_CASE("elementwise ops with broadcasting") {
  Tensor a = tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  Tensor bias = tensor({10.f, 20.f, 30.f});
  CHECK(internal::add(a, bias).to_vector<float>() == std::vector<float>{11, 22, 33, 14, 25, 36});
  Tensor col = tensor({1.f, 2.f}, {2, 1});
  CHECK(internal::sub(a, col).to_vector<float>() == std::vector<float>{0, 1, 2, 2, 3, 4});
  CHECK(internal::mul(a, scalar_tensor(2.0)).to_vector<float>() == std::vector<float>{2, 4, 6, 8, 10, 12});
  CHECK(internal::div(a, a).to_vector<float>() == std::vector<float>(6, 1.f));
  CHECK(internal::add(col, bias).shape() == Shape{2, 3});  // [2,1] + [3] -> [2,3]
  CHECK(internal::add(col, bias).to_vector<float>() == std::vector<float>{11, 21, 31, 12, 22, 32});
  CHECK(internal::binary_scalar(BinaryOp::Sub, a, 1.0, true).to_vector<float>() ==
        std::vector<float>{0, -1, -2, -3, -4, -5});
  CHECK(internal::binary_scalar(BinaryOp::Div, a, 2.0).to_vector<float>() ==
        std::vector<float>{0.5, 1, 1.5, 2, 2.5, 3});
  Tensor x = tensor({-1.0, 0.0, 2.0}, {3});
  CHECK(internal::relu(x).to_vector<double>() == std::vector<double>{0, 0, 2});
  CHECK(internal::neg(x).to_vector<double>() == std::vector<double>{1, -0.0, -2});
  auto e = internal::exp(x).to_vector<double>();
  CHECK(e[0] == doctest::Approx(std::exp(-1.0)));
  CHECK(e[2] == doctest::Approx(std::exp(2.0)));
  CHECK(internal::log(tensor({1.0, std::exp(1.0)})).to_vector<double>()[1] == doctest::Approx(1.0));
  CHECK(internal::binary(BinaryOp::ReluBackward, tensor({5.0, 5.0, 5.0}), x).to_vector<double>() == std::vector<double>{0, 0, 5});
  Tensor eq = internal::eq(tensor(std::vector<int64_t>{1, 2, 3}), tensor(std::vector<int64_t>{1, 0, 3}));
  CHECK(eq.dtype() == kBool);
  CHECK(eq.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  // A 3-D broadcast that needs the general strided path.
  Tensor p = internal::reshape(arange(12, kFloat64), {2, 3, 2});
  Tensor q = tensor({100.0, 200.0}, {2, 1, 1});
  auto pq = internal::add(p, q).to_vector<double>();
  CHECK(pq[0] == 100);
  CHECK(pq[5] == 105);
  CHECK(pq[6] == 206);
  CHECK(pq[11] == 211);
  Tensor m = tensor({1.0, 0.0}, {1, 2});
  auto pm = internal::mul(p, m).to_vector<double>();
  CHECK(pm == std::vector<double>{0, 0, 2, 0, 4, 0, 6, 0, 8, 0, 10, 0});
}

TEST_CASE("bad elementwise input is a clear error") {
  Tensor a = zeros({3, 4});
  CHECK(error_of([&] { internal::add(a, zeros({5})); }) ==
        "add: shapes [3, 4] and [5] cannot be broadcast (dimension 1: 4 vs 5)");
  // Mixed dtypes promote, as PyTorch: float32 * float64 is float64.
  CHECK(internal::mul(a, zeros({3, 4}, kFloat64)).dtype() == kFloat64);
  CHECK(error_of([&] { internal::exp(arange(3)); }) == "exp: expected a floating-point tensor, got int64");
  CHECK(error_of([&] { internal::add(a, Tensor()); }) == "add: got an undefined tensor");
  // Without the CUDA backend: "built without CUDA"; with it but no GPU here: CUDA's own error; with GPUs,
  // the first index past them is named with the count.
  const int gpus = cuda::device_count();
  std::string cuda_error = error_of([&] { zeros({2}, Device::cuda(gpus)); });
  INFO("error: ", cuda_error);
  if (!has_backend(DeviceType::CUDA)) CHECK(cuda_error.find("lockstep was built without CUDA") == 0);
  else if (gpus == 0) CHECK(cuda_error.find("CUDA") != std::string::npos);
  else CHECK(cuda_error.find("cuda:" + std::to_string(gpus) + " is not available: " + std::to_string(gpus)) != std::string::npos);
  CHECK(error_of([&] { zeros({-1}); }).find("negative dimension") != std::string::npos);
}

// Reference GEMM: a triple loop in double.
static std::vector<double> naive_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                                        int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

TEST_CASE("matmul against a naive triple loop on odd and non-square sizes, with transposes") {
  manual_seed(1);
  const int64_t sizes[][3] = {{1, 1, 1}, {1, 7, 1}, {3, 1, 5}, {7, 13, 5}, {64, 33, 17}, {128, 256, 129}};
  for (Dtype dt : {kFloat32, kFloat64}) {
    for (auto& s : sizes) {
      int64_t m = s[0], k = s[1], n = s[2];
      Tensor a = randn({m, k}, dt), b = randn({k, n}, dt);
      auto want = naive_matmul(a.to_vector<double>(), b.to_vector<double>(), m, k, n);
      double tol = dt == kFloat32 ? 1e-4 : 1e-12;
      auto check = [&](const Tensor& c) {
        REQUIRE(c.shape() == Shape{m, n});
        auto got = c.to_vector<double>();
        for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol).scale(k));
      };
      check(internal::matmul(a, b));
      Tensor at = internal::transpose(a), bt = internal::transpose(b);
      check(internal::matmul(at, b, true, false));
      check(internal::matmul(a, bt, false, true));
      check(internal::matmul(at, bt, true, true));
      // Accumulating form: out = 2 * a @ b + 1 * out.
      Tensor out = ones({m, n}, dt);
      internal::gemm_(out, a, false, b, false, 2.0, 1.0);
      auto acc = out.to_vector<double>();
      for (size_t i = 0; i < acc.size(); ++i) CHECK(acc[i] == doctest::Approx(2 * want[i] + 1).epsilon(tol).scale(k));
    }
  }
}

TEST_CASE("Philox4x32-10 gives Random123's known answers; the CPU backend's uniform() draws from it") {
  using detail::Philox4;
  auto words = [](Philox4 r) { return std::vector<uint32_t>(r.v, r.v + 4); };
  CHECK(words(detail::philox4x32_10(Philox4{{0, 0, 0, 0}}, 0, 0)) ==
        std::vector<uint32_t>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(words(detail::philox4x32_10(Philox4{{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u)) ==
        std::vector<uint32_t>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(words(detail::philox4x32_10(Philox4{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822,
                                    0x299f31d0)) == std::vector<uint32_t>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
  // Element i of a float32 draw: the top 24 bits of word 0 of counter (base + i), scaled by 2^-24.
  Tensor u = empty({3});
  backend_for(Device::cpu()).uniform(u, -1.0, 3.0, 0, 0);
  CHECK(u.to_vector<double>()[0] == -1.0 + 4.0 * (0x6627e8d5u >> 8) * 0x1.0p-24);
  // float64: 53 bits from words 0 and 1.
  Tensor d = empty({1}, kFloat64);
  backend_for(Device::cpu()).uniform(d, 0.0, 1.0, 0, 0);
  CHECK(d.to_vector<double>()[0] == ((uint64_t{0x6627e8d5} << 32 | 0xe169c58d) >> 11) * 0x1.0p-53);
}

TEST_CASE("gemm_ with a bias: every row gains it, beta 0 does not read the output, bad biases are named") {
  Tensor a = tensor({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2}), w = tensor({1.0f, 0.0f, 1.0f, 1.0f}, {2, 2});  // float32
  Tensor bias = tensor({10.0f, 20.0f}, {2});
  Tensor out = full({2, 2}, std::nan(""));
  internal::gemm_(out, a, false, w, true, 1.0, 0.0, bias);
  // a w^T = [[1, 3], [3, 7]]
  CHECK(out.to_vector<double>() == std::vector<double>{11, 23, 13, 27});
  out = ones({2, 2});
  internal::gemm_(out, a, false, w, true, 2.0, 0.5, bias);
  CHECK(out.to_vector<double>() == std::vector<double>{12.5, 26.5, 16.5, 34.5});
  CHECK(error_of([&] { internal::gemm_(out, a, false, w, true, 1.0, 0.0, zeros({3})); }) ==
        "gemm_: bias [3] float32 on cpu does not match the product [2, 2] float32 on cpu (expected [2] of that dtype "
        "and device)");
}

TEST_CASE("matmul of attention's head views, read in place by the GEMM one batch index at a time") {
  // q, k, v as nanoGPT splits them: [B, H, T, hs] views of one [B, T, 3C] tensor, whose batch
  // dimensions (strides 3TC and hs) no single stride walks. Each product must equal the one of
  // contiguous copies, and leave the operands untouched.
  manual_seed(3);
  const int64_t B = 3, T = 5, H = 2, hs = 4, C = H * hs;
  Tensor qkv = randn({B, T, 3 * C}, kFloat64);
  const std::vector<double> before = qkv.to_vector<double>();
  auto heads = [&](int64_t part) {
    return internal::transpose(internal::view(internal::narrow(qkv, 2, part * C, C), {B, T, H, hs}), 1, 2);
  };
  Tensor q = heads(0), k = heads(1), v = heads(2);
  Tensor kt = internal::transpose(k, 2, 3);
  Tensor att = internal::matmul(q, kt);
  CHECK(internal::allclose(att, internal::matmul(internal::contiguous(q), internal::contiguous(kt)), 1e-12, 1e-12));
  Tensor y = internal::matmul(att, v);
  CHECK(internal::allclose(y, internal::matmul(att, internal::contiguous(v)), 1e-12, 1e-12));
  CHECK(y.shape() == Shape{B, H, T, hs});
  CHECK(qkv.to_vector<double>() == before);
}

TEST_CASE("matmul rejects bad shapes and dtypes") {
  CHECK(error_of([] { internal::matmul(zeros({3, 4}), zeros({5, 2})); }) == "matmul: [3, 4] x [5, 2]: inner dimensions differ");
  CHECK(error_of([] { internal::matmul(zeros({3, 4}), zeros({2, 5}), false, true); }) ==
        "matmul: [3, 4] x [2, 5]^T: inner dimensions differ");
  // torch.matmul's rules: a 1-D operand is a row (or column) vector, removed from the result.
  CHECK(internal::matmul(ones({3}), ones({3, 2})).shape() == Shape{2});
  CHECK(error_of([] { internal::matmul(arange(4), arange(4)); }) == "matmul: expected floating-point tensors, got int64");
  CHECK(error_of([] { internal::matmul(zeros({2, 2}), zeros({2, 2}, kFloat64)); }).find("dtypes differ") != std::string::npos);
}

TEST_CASE("reductions") {
  Tensor a = tensor({1.0, 5.0, 3.0, 4.0, 2.0, 6.0}, {2, 3});
  CHECK(internal::sum(a).item<double>() == 21);
  CHECK(internal::sum(a).dim() == 0);
  CHECK(internal::mean(a).item<double>() == 3.5);
  CHECK(internal::sum(a, 0).to_vector<double>() == std::vector<double>{5, 7, 9});
  CHECK(internal::sum(a, 1).to_vector<double>() == std::vector<double>{9, 12});
  CHECK(internal::sum(a, 1, true).shape() == Shape{2, 1});
  CHECK(internal::mean(a, 0).to_vector<double>() == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(internal::max(a, 1).to_vector<double>() == std::vector<double>{5, 6});
  CHECK(internal::max(a, 0).to_vector<double>() == std::vector<double>{4, 5, 6});
  CHECK(internal::argmax(a, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(internal::argmax(a, -2).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(internal::argmax(a, 1, true).shape() == Shape{2, 1});
  CHECK(internal::sum(arange(5)).item<int64_t>() == 10);
  CHECK(internal::sum(zeros({0})).item<float>() == 0.f);
  CHECK(std::isnan(internal::mean(zeros({0})).item<float>()));
  CHECK(internal::sum_to(ones({4, 2, 3}), {3}).to_vector<float>() == std::vector<float>{8, 8, 8});
  CHECK(internal::sum_to(ones({4, 2, 3}), {2, 1}).to_vector<float>() == std::vector<float>{12, 12});
  CHECK(error_of([&] { internal::sum(a, 2); }) == "sum: dimension 2 out of range for a 2-D tensor");
  CHECK(error_of([&] { internal::argmax(zeros({3, 0}), 1); }).find("argmax: cannot reduce an empty dimension") == 0);
  // As torch.max and torch.maximum: a NaN anywhere makes the result NaN, wherever it stands.
  const double nan = std::nan("");
  Tensor with_nan = tensor({1.0, nan, 3.0, nan, 5.0, 6.0}, {2, 3});
  const std::vector<double> row_max = internal::max(with_nan, 1).to_vector<double>();
  CHECK((std::isnan(row_max[0]) && std::isnan(row_max[1])));
  const std::vector<double> col_max = internal::max(with_nan, 0).to_vector<double>();
  CHECK((std::isnan(col_max[0]) && std::isnan(col_max[1]) && col_max[2] == 6));
  const std::vector<double> m = internal::maximum(tensor({1.0, nan, 2.0}), tensor({nan, 1.0, 1.0})).to_vector<double>();
  CHECK((std::isnan(m[0]) && std::isnan(m[1]) && m[2] == 2));
}

TEST_CASE("log_softmax is stable and matches the definition") {
  Tensor x = tensor({1.0, 2.0, 3.0, 1000.0, 1000.0, 1000.0}, {2, 3});
  auto y = internal::log_softmax(x, 1).to_vector<double>();
  double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(y[0] == doctest::Approx(1.0 - lse));
  CHECK(y[2] == doctest::Approx(3.0 - lse));
  CHECK(y[3] == doctest::Approx(-std::log(3.0)));  // no overflow at 1000
  auto y0 = internal::log_softmax(x, 0).to_vector<double>();
  CHECK(y0[0] == doctest::Approx(1.0 - 1000.0));
  CHECK(y0[3] == doctest::Approx(0.0));
}

TEST_CASE("the float32 exp the CPU kernels use is within 2 ulp of expf, denormals, inf and NaN included") {
  auto ulps = [](float a, float b) {  // distance in representable floats (both finite, same sign)
    return std::abs(int64_t(std::bit_cast<int32_t>(a)) - int64_t(std::bit_cast<int32_t>(b)));
  };
  int64_t worst = 0;
  float worst_at = 0;
  for (float x = -110.f; x < 90.f; x += 0.0007f) {
    const float want = std::exp(x), got = math::exp(x);
    if (std::isinf(want)) {
      CHECK(got == want);
    } else if (ulps(got, want) > worst) {
      worst = ulps(got, want);
      worst_at = x;
    }
  }
  INFO("worst at x = " << worst_at);
  CHECK(worst <= 2);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(math::exp(-inf) == 0.f);
  CHECK(math::exp(-104.f) == 0.f);
  CHECK(math::exp(inf) == inf);
  CHECK(math::exp(0.f) == 1.f);
  CHECK(std::isnan(math::exp(std::nanf(""))));
  CHECK(math::exp(-90.f) > 0.f);  // a denormal result, as expf's
  CHECK(math::exp(-90.f) < std::numeric_limits<float>::min());
}

TEST_CASE("softmax of a masked (-inf) score is exactly 0, not a denormal") {
  // A causal attention row: 32 scores (a whole AVX-512 vector and then some), the later ones masked.
  // A denormal here made every product with the attention matrix 30-60x slower.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> row(40, -inf);
  for (int i = 0; i < 5; ++i) row[i] = 0.5f * i;
  row[5] = -100.f;  // exp(-100 - 2) is a genuine denormal result, kept as expf (and PyTorch) keep it
  for (Dtype dt : {kFloat32, kFloat64}) {
    Tensor x = internal::to_dtype(tensor(row, {1, 40}), dt);
    std::vector<double> y = internal::to_dtype(internal::softmax(x, 1, false), kFloat64).to_vector<double>();
    double sum = 0;
    for (int i = 0; i < 5; ++i) sum += std::exp(0.5 * i);
    for (int i = 0; i < 5; ++i) CHECK(y[i] == doctest::Approx(std::exp(0.5 * i) / sum));
    CHECK(y[5] > 0.0);
    if (dt == kFloat32) CHECK(y[5] < std::numeric_limits<float>::min());
    for (int i = 6; i < 40; ++i) CHECK(y[i] == 0.0);
    // log_softmax's backward takes exp of -inf as well: the masked entries' gradients are exactly g.
    Tensor ls = internal::log_softmax(x, 1);
    Tensor g = ones({1, 40}, dt);
    std::vector<double> gi = internal::to_dtype(internal::softmax_backward(g, ls, 1, true), kFloat64).to_vector<double>();
    for (int i = 6; i < 40; ++i) CHECK(gi[i] == 1.0);
  }
}

TEST_CASE("nll_loss and out-of-range targets") {
  Tensor lp = internal::log_softmax(tensor({0.0, 0.0, 1.0, 3.0}, {2, 2}), 1);
  Tensor t = tensor(std::vector<int64_t>{1, 0});
  double want = -(std::log(0.5) + (1.0 - std::log(std::exp(1.0) + std::exp(3.0)))) / 2;
  CHECK(internal::nll_loss(lp, t).item<double>() == doctest::Approx(want));
  Tensor g = internal::nll_loss_backward(scalar_tensor(1.0, kFloat64), lp, t);
  CHECK(g.to_vector<double>() == std::vector<double>{0, -0.5, -0.5, 0});
  CHECK(error_of([&] { internal::nll_loss(lp, tensor(std::vector<int64_t>{1, 2})); }) ==
        "cross_entropy: target 2 at position 1 is out of range for 2 classes");
  CHECK(error_of([&] { internal::nll_loss(lp, tensor({1.0, 0.0})); }) == "nll_loss: expected int64 class targets, got float64");
  CHECK(error_of([&] { internal::nll_loss(lp, tensor(std::vector<int64_t>{1})); })
            .find("nll_loss: target [1] does not match input [2, 2]") == 0);
}

TEST_CASE("index_select gathers rows; index_add_ scatters them back") {
  Tensor a = internal::reshape(arange(6, kFloat32), {3, 2});
  Tensor idx = tensor(std::vector<int64_t>{2, 0, 2});
  Tensor r = internal::index_select(a, idx);
  CHECK(r.shape() == Shape{3, 2});
  CHECK(r.to_vector<float>() == std::vector<float>{4, 5, 0, 1, 4, 5});
  Tensor acc = zeros({3, 2});
  internal::index_add_(acc, idx, r);
  CHECK(acc.to_vector<float>() == std::vector<float>{0, 1, 0, 0, 8, 10});
  CHECK(error_of([&] { internal::index_select(a, tensor(std::vector<int64_t>{3})); }) ==
        "index_select: index 3 at position 0 is out of range for a dimension of size 3");
  CHECK(error_of([&] { internal::index_select(a, tensor({1.0})); }) == "index_select: expected an int64 index, got float64");
  Tensor s = internal::stack({tensor({1.f, 2.f}), tensor({3.f, 4.f})});
  CHECK(s.shape() == Shape{2, 2});
  CHECK(s.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(error_of([] { internal::stack({zeros({2}), zeros({3})}); }).find("stack: tensor 1 is [3]") == 0);
}

TEST_CASE("dtype conversion, transpose and printing") {
  Tensor a = tensor({1.7, -2.2}, {2});
  CHECK(internal::to_dtype(a, kInt64).to_vector<int64_t>() == std::vector<int64_t>{1, -2});
  CHECK(internal::to_dtype(a, kFloat32).dtype() == kFloat32);
  CHECK(internal::to_dtype(a, kFloat64).is_same(a));
  Tensor m = internal::reshape(arange(6, kFloat32), {2, 3});
  Tensor mt = internal::transpose(m);
  CHECK(mt.shape() == Shape{3, 2});
  CHECK(mt.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  std::ostringstream os;
  os << zeros({15, 5}).shape();
  CHECK(os.str() == "[15, 5]");
  std::ostringstream ts;
  ts << m;
  CHECK(ts.str() == "tensor([[0, 1, 2], [3, 4, 5]], shape=[2, 3], dtype=float32, device=cpu)");
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(error_of([] { Device::parse("gpu"); }).find("cannot parse 'gpu'") != std::string::npos);
  CHECK(error_of([] { zeros({2}).item<float>(); }) == "Tensor::item: expected a tensor with one element, got shape [2]");
  CHECK(error_of([] { zeros({2}).data<double>(); }) == "Tensor::data: requested float64 from a float32 tensor");
}

TEST_CASE("the CPU allocator's block cache reuses large blocks by exact size, up to its cap") {
  const size_t big = cpu::BlockCache::kMinBytes;
  cpu::BlockCache cache(3 * big);
  CHECK(cache.take(big) == nullptr);
  void* a = std::aligned_alloc(64, big);
  void* b = std::aligned_alloc(64, 2 * big);
  void* c = std::aligned_alloc(64, big);
  void* small = std::aligned_alloc(64, 4096);
  CHECK_FALSE(cache.put(small, 4096));  // small blocks stay with malloc
  std::free(small);
  CHECK(cache.put(a, big));
  CHECK(cache.put(b, 2 * big));
  CHECK_FALSE(cache.put(c, big));  // over the cap: the caller frees it
  std::free(c);
  CHECK(cache.cached_bytes() == 3 * big);
  CHECK(cache.take(big + 64) == nullptr);  // exact sizes only
  CHECK(cache.take(2 * big) == b);
  CHECK(cache.take(big) == a);
  CHECK(cache.take(big) == nullptr);
  CHECK(cache.cached_bytes() == 0);
  std::free(a);
  std::free(b);

  // Through tensors: a freed large tensor's block comes back for the next tensor of its size.
  const void* first = nullptr;
  {
    Tensor t = empty({int64_t(big / 4)});
    first = t.data_ptr();
  }
  Tensor u = empty({int64_t(big / 4)});
  CHECK(u.data_ptr() == first);

  // empty_cache hands every cached block back: nothing is held after it.
  { Tensor v = empty({int64_t(big / 2)}); }
  CHECK(cpu::memory_cached() >= big * 2);
  cpu::empty_cache();
  CHECK(cpu::memory_cached() == 0);
  cache.put(std::aligned_alloc(64, big), big);
  cache.release();
  CHECK(cache.cached_bytes() == 0);
  CHECK(cache.take(big) == nullptr);
}
