// Normal draws on a CUDA device (randn, normal, randn_like, nn::init::normal_ and trunc_normal_): each
// element drawn there by Philox and Box-Muller (tensor/philox.h) from the generator's seed and counter,
// as the CPU backend's normal() computes them; their moments over 10^6 draws; the same tensors after
// manual_seed, new ones on every call; 16-bit draws equal to the float32 ones rounded; the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/init.h"
#include "tensor/api.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/util/tensor_match.h"
#include "tests/util/test_util.h"

using namespace lockstep;

namespace {

using lockstep::testing::expect_error;

const Device kGpu = Device::cuda(0);
const Dtype kHalves[] = {kBFloat16, kFloat16};

Tensor host(const Tensor& t) { return internal::to_device(t, Device::cpu()); }

// Sample moments of a tensor's values, in float64.
struct Moments {
  double mean = 0, var = 0, skew = 0, kurt = 0, within1 = 0, min = 0, max = 0;
};

Moments moments(const Tensor& t) {
  const std::vector<double> v = host(t).to_vector<double>();
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  double m2 = 0, m3 = 0, m4 = 0;
  for (double x : v) {
    const double d = x - m.mean;
    m2 += d * d, m3 += d * d * d, m4 += d * d * d * d;
    if (std::abs(d) < 1) m.within1 += 1;
  }
  const double n = static_cast<double>(v.size());
  m.var = m2 / n;
  m.skew = m3 / n / std::pow(m.var, 1.5);
  m.kurt = m4 / n / (m.var * m.var);
  m.within1 /= n;
  m.min = *std::min_element(v.begin(), v.end());
  m.max = *std::max_element(v.begin(), v.end());
  return m;
}

}  // namespace

TEST_CASE("randn on the device: Philox Box-Muller draws made there, as the CPU backend's, repeatable, new each call") {
  REQUIRE_DEVICE();
  Backend& cpu = backend_for(DeviceType::CPU);
  manual_seed(7);
  Tensor a = randn({1000}, {kFloat32, kGpu});                 // counters 0..999
  Tensor b = randn({10}, {kFloat64, kGpu});                   // 1000..1009
  Tensor c = normal(2.0, 0.5, {3, 4}, {kFloat32, kGpu});      // 1010..1021
  CHECK(a.device() == kGpu);
  Tensor want_a = empty({1000}), want_b = empty({10}, kFloat64), want_c = empty({3, 4});
  cpu.normal(want_a, 0.0, 1.0, 7, 0);
  cpu.normal(want_b, 0.0, 1.0, 7, 1000);
  cpu.normal(want_c, 2.0, 0.5, 7, 1010);
  // Equal on the emulator; a GPU's logf and cosf may differ from the host's in the last ulp.
  CHECK_MATCH(a, want_a, 1e-5, 1e-6);
  CHECK_MATCH(b, want_b, 1e-13, 1e-14);
  CHECK_MATCH(c, want_c, 1e-5, 1e-6);
  // Box-Muller by hand for element 0 of want_b: u1 = 1 - (53 bits of words 0, 1), u2 = words 2, 3.
  const detail::Philox4 r = detail::philox4x32_10(uint64_t{1000}, uint64_t{7});
  const double u1 = 1.0 - static_cast<double>((uint64_t{r.v[0]} << 32 | r.v[1]) >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>((uint64_t{r.v[2]} << 32 | r.v[3]) >> 11) * 0x1.0p-53;
  CHECK(want_b.to_vector<double>()[0] == std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2));

  // The same seed: the same tensors, bit for bit.
  manual_seed(7);
  CHECK_MATCH(randn({1000}, {kFloat32, kGpu}), a, 0.0);
  CHECK_MATCH(randn({10}, {kFloat64, kGpu}), b, 0.0);
  // Each call draws from new counters: no element of the next draw equals the one before.
  Tensor next = randn({1000}, {kFloat32, kGpu});
  const std::vector<double> va = host(a).to_vector<double>(), vn = host(next).to_vector<double>();
  int64_t same = 0;
  for (size_t i = 0; i < va.size(); ++i) same += va[i] == vn[i];
  CHECK(same == 0);
  // randn_like keeps the device and dtype; a different seed gives different values.
  manual_seed(8);
  Tensor l = randn_like(a);
  CHECK(l.device() == kGpu);
  CHECK(l.dtype() == kFloat32);
  CHECK(host(l).to_vector<double>()[0] != va[0]);
  // Host draws are their own stream (the Mersenne Twister's), untouched by device draws.
  manual_seed(7);
  Tensor h = randn({5});
  manual_seed(7);
  randn({5}, {kFloat32, kGpu});
  CHECK_MATCH(randn({5}), h, 0.0);
}

TEST_CASE("randn on the device: mean, variance, skew, kurtosis and tails of 10^6 draws") {
  REQUIRE_DEVICE();
  // 5 standard errors for n = 10^6: mean 0.005, variance 5 sqrt(2 / n) = 0.0071, skew 5 sqrt(6 / n) =
  // 0.012, kurtosis 5 sqrt(24 / n) = 0.025, P(|x| < 1) = 0.682689 within 5 sqrt(p (1 - p) / n) = 0.0023.
  // The seed is fixed: the same values every run.
  for (Dtype dt : {kFloat32, kFloat64}) {
    INFO(dtype_name(dt));
    manual_seed(21);
    const Moments m = moments(randn({1000, 1000}, {dt, kGpu}));
    CHECK(std::abs(m.mean) < 0.005);
    CHECK(std::abs(m.var - 1) < 0.0071);
    CHECK(std::abs(m.skew) < 0.012);
    CHECK(std::abs(m.kurt - 3) < 0.025);
    CHECK(std::abs(m.within1 - 0.682689) < 0.0023);
    // 63 of 10^6 expected beyond 4 sigma on each side of 0 together; none beyond 6.7 (float32's u1 of
    // 2^-33 bounds it; float64's chance beyond 6.7 is 2e-11 per draw).
    CHECK(m.max > 4);
    CHECK(m.min < -4);
    CHECK(std::max(m.max, -m.min) < 6.7);
  }
  // normal(mean, std): shifted and scaled.
  manual_seed(22);
  const Moments m = moments(normal(3.0, 2.0, {1000000}, {kFloat32, kGpu}));
  CHECK(std::abs(m.mean - 3) < 0.01);
  CHECK(std::abs(m.var - 4) < 0.029);
}

TEST_CASE("16-bit randn on the device is the float32 draw rounded once; float64 is its own draw") {
  REQUIRE_DEVICE();
  for (Dtype dt : kHalves) {
    INFO(dtype_name(dt));
    manual_seed(5);
    Tensor r = randn({4001}, {dt, kGpu});
    Tensor n = normal(1.0, 0.25, {333}, {dt, kGpu});
    manual_seed(5);
    Tensor r32 = randn({4001}, {kFloat32, kGpu});
    Tensor n32 = normal(1.0, 0.25, {333}, {kFloat32, kGpu});
    CHECK(r.dtype() == dt);
    CHECK(r.device() == kGpu);
    CHECK_MATCH(r, internal::to_dtype(host(r32), dt), 0.0);
    CHECK_MATCH(n, internal::to_dtype(host(n32), dt), 0.0);
    Tensor like = randn_like(r);
    CHECK(like.dtype() == dt);
    CHECK(like.device() == kGpu);
  }
  // float64 draws 53-bit uniforms: not the float32 draw widened.
  manual_seed(5);
  Tensor d = randn({100}, {kFloat64, kGpu});
  manual_seed(5);
  Tensor f = randn({100}, {kFloat32, kGpu});
  const std::vector<double> vd = host(d).to_vector<double>(), vf = host(f).to_vector<double>();
  int64_t close = 0;
  for (size_t i = 0; i < vd.size(); ++i) close += std::abs(vd[i] - vf[i]) < 1e-3;
  CHECK(close < 5);
}

TEST_CASE("nn::init::normal_ and trunc_normal_ on a device tensor draw there") {
  REQUIRE_DEVICE();
  for (Dtype dt : {kFloat32, kBFloat16, kFloat64}) {
    INFO(dtype_name(dt));
    manual_seed(3);
    Tensor w = zeros({64, 32}, {dt, kGpu});
    nn::init::normal_(w, 0.5, 0.02);
    manual_seed(3);
    CHECK_MATCH(w, normal(0.5, 0.02, {64, 32}, {dt, kGpu}), 0.0);
    // A strided view is filled in place.
    Tensor big = zeros({8, 16}, {dt, kGpu}), cols = internal::slice(big, 1, 0, 16, 2);
    nn::init::normal_(cols, 0, 1);
    const std::vector<double> v = host(big).to_vector<double>();
    int64_t zero_odd = 0, nonzero_even = 0;
    for (size_t i = 0; i < v.size(); ++i) (i % 2 ? zero_odd += v[i] == 0 : nonzero_even += v[i] != 0);
    CHECK(zero_odd == 64);
    CHECK(nonzero_even == 64);
  }
  // trunc_normal_ to [-0.5, 0.5] of N(0, 1): 62% of the first draws are redrawn, every value ends inside,
  // and the variance is the truncated normal's, 1 - 2 b phi(b) / (2 Phi(b) - 1) = 0.07951 for b = 0.5.
  manual_seed(4);
  Tensor t = empty({200000}, {kFloat32, kGpu});
  nn::init::trunc_normal_(t, 0, 1, -0.5, 0.5);
  const Moments m = moments(t);
  CHECK(m.min >= -0.5);
  CHECK(m.max <= 0.5);
  CHECK(m.min < -0.499);
  CHECK(m.max > 0.499);
  const double b = 0.5, phi = std::exp(-b * b / 2) / std::sqrt(2 * M_PI), mass = std::erf(b / std::sqrt(2.0));
  const double var = 1 - 2 * b * phi / mass;  // Var of N(0, 1) given |x| < b
  CHECK(std::abs(m.mean) < 5 * std::sqrt(var / 2e5));
  CHECK(std::abs(m.var - var) < 0.001);
  // The same seed gives the same tensor.
  manual_seed(4);
  Tensor again = empty({200000}, {kFloat32, kGpu});
  nn::init::trunc_normal_(again, 0, 1, -0.5, 0.5);
  CHECK_MATCH(again, t, 0.0);
}

TEST_CASE("normal draws on the device: errors name the op and the offending dtype or value") {
  REQUIRE_DEVICE();
  expect_error("randn int64", [] { randn({3}, {kInt64, kGpu}); }, {"randn", "int64"});
  expect_error("normal bool", [] { normal(0, 1, {3}, {kBool, kGpu}); }, {"normal", "bool"});
  expect_error("normal std < 0", [] { normal(0, -1, {3}, {kFloat32, kGpu}); }, {"normal", "std", "-1"});
  expect_error("randn_like int64", [] { randn_like(zeros({2}, {kInt64, kGpu})); }, {"randn_like", "int64"});
  expect_error("backend normal int64", [] {
    Tensor out({4}, kInt64, kGpu);
    backend_for(DeviceType::CUDA).normal(out, 0, 1, 0, 0);
  }, {"normal", "int64"});
  Tensor i = zeros({4}, {kInt64, kGpu});
  expect_error("init::normal_ int64", [&] { nn::init::normal_(i); }, {"normal_", "int64"});
  Tensor f = zeros({4}, {kFloat32, kGpu});
  expect_error("trunc_normal_ a >= b", [&] { nn::init::trunc_normal_(f, 0, 1, 1, -1); }, {"trunc_normal_", "a = 1"});
}
