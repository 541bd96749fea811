// float16 (tensor/float16.h) as a storage dtype: the conversion's rounding at the edges of the format,
// hand-computed (and equal to PyTorch's .to(torch.float16)), and the dtype's place in the tensor layer.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "autograd/api.h"
#include "tensor/api.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;

namespace {
uint16_t bits_of(float f) { return Float16(f).bits; }
float from_bits(uint16_t b) { return Float16::to_float(b); }
}  // namespace

TEST_CASE("float32 -> float16 rounds to nearest even, at the edges of the range") {
  CHECK(bits_of(65504.0f) == 0x7bff);           // the largest finite float16
  CHECK(bits_of(65519.99f) == 0x7bff);          // below half way to 65536: stays finite
  CHECK(bits_of(65520.0f) == 0x7c00);           // half way: ties to even, which is inf
  CHECK(bits_of(-65520.0f) == 0xfc00);
  CHECK(bits_of(70000.0f) == 0x7c00);
  CHECK(bits_of(0x1p-14f) == 0x0400);           // 6.1035e-5, the smallest normal
  CHECK(bits_of(1023.5f * 0x1p-24f) == 0x0400); // the largest subnormal's tie rounds up into the normals
  CHECK(bits_of(0x1p-24f) == 0x0001);           // 5.96e-8, the smallest subnormal
  CHECK(bits_of(0x1p-25f) == 0x0000);           // half of it: ties to even zero
  CHECK(bits_of(1.5f * 0x1p-25f) == 0x0001);    // above half: up
  CHECK(bits_of(3.0f * 0x1p-25f) == 0x0002);    // 1.5 units: ties to the even 2
  CHECK(bits_of(1e-8f) == 0x0000);
  CHECK(bits_of(1.0f + 0x1p-11f) == 0x3c00);    // half an ulp above 1: ties to even 1.0
  CHECK(bits_of(1.0f + 3 * 0x1p-11f) == 0x3c02);  // 1.5 ulps: ties to the even mantissa 2
  CHECK(bits_of(2049.0f) == 0x6800);            // ulp 2 at 2048: 2049 ties to 2048
  CHECK(bits_of(2051.0f) == 0x6802);            // and 2051 to 2052
  CHECK(bits_of(0.1f) == 0x2e66);
  CHECK(bits_of(-0.0f) == 0x8000);
  CHECK(bits_of(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(bits_of(-std::numeric_limits<float>::infinity()) == 0xfc00);
  const uint16_t nan = bits_of(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);  // a NaN, not an inf
  CHECK((bits_of(-std::numeric_limits<float>::quiet_NaN()) & 0x8000) == 0x8000);
  // A signalling NaN whose payload lies only in the bits float16 drops stays a NaN.
  uint32_t snan_bits = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  CHECK((bits_of(snan) & 0x03ff) != 0);
}

TEST_CASE("float16 -> float32 is exact: normals, subnormals, zeros, inf and NaN") {
  CHECK(from_bits(0x7bff) == 65504.0f);
  CHECK(from_bits(0x0400) == 0x1p-14f);
  CHECK(from_bits(0x0001) == 0x1p-24f);
  CHECK(from_bits(0x03ff) == 1023.0f * 0x1p-24f);
  CHECK(from_bits(0x3c00) == 1.0f);
  CHECK(from_bits(0xc000) == -2.0f);
  CHECK(from_bits(0x2e66) == 0.0999755859375f);
  CHECK(std::signbit(from_bits(0x8000)));
  CHECK(from_bits(0x8000) == 0.0f);
  CHECK(from_bits(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(from_bits(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(from_bits(0x7e00)));
  // Every finite float16 survives float32 and back.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7c00) == 0x7c00) continue;
    REQUIRE(bits_of(from_bits(static_cast<uint16_t>(b))) == b);
  }
}

TEST_CASE("kFloat16 tensors: to(), factories, elementwise in float32 rounded once, promotion, printing") {
  CHECK(element_size(kFloat16) == 2);
  CHECK(is_floating_point(kFloat16));
  CHECK(kHalf == kFloat16);
  CHECK(std::string(dtype_name(kFloat16)) == "float16");
  Tensor a = tensor({65504.0f, 70000.0f, 1e-8f, 0.1f}, {4}).to(kFloat16);
  CHECK(a.dtype() == kFloat16);
  CHECK(a.to(kFloat32).to_vector<float>() ==
        std::vector<float>{65504.0f, std::numeric_limits<float>::infinity(), 0.0f, 0.0999755859375f});
  CHECK(ones({3}, {kFloat16}).to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(full({2}, 2051.0, {kFloat16}).to_vector<double>() == std::vector<double>{2052, 2052});
  CHECK(arange(3, {kFloat16}).to_vector<double>() == std::vector<double>{0, 1, 2});
  // 2048 + 1 = 2049 in float32, rounded once: 2048. The sum of [2048, 1, 1] in float32 is 2050, exact.
  Tensor x = full({1}, 2048.0, {kFloat16}), one = ones({1}, {kFloat16});
  Tensor y = x + one;
  CHECK(y.dtype() == kFloat16);
  CHECK(y.item<double>() == 2048.0);
  Tensor s = tensor({2048.0f, 1.0f, 1.0f}, {3}).to(kFloat16).sum();
  CHECK(s.dtype() == kFloat16);
  CHECK(s.item<double>() == 2050.0);
  CHECK((x * 40.0).item<double>() == std::numeric_limits<double>::infinity());  // 81920 overflows float16
  // PyTorch's promotion: float16 with bfloat16 is float32; with float32 float32; with int64 float16.
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kBFloat16, kFloat16) == kFloat32);
  CHECK(promote_types(kFloat16, kFloat32) == kFloat32);
  CHECK(promote_types(kInt64, kFloat16) == kFloat16);
  CHECK((x + ones({1}, {kBFloat16})).dtype() == kFloat32);
  CHECK((x + ones({1}, {kBFloat16})).item<double>() == 2049.0);
  // Between the two 16-bit formats: bfloat16's 8 bits of mantissa round 2049 to 2048 as well.
  CHECK(full({1}, 1.0 / 3, {kBFloat16}).to(kFloat16).to_vector<float>()[0] == Float16(float(BFloat16(1.0f / 3))));
  std::ostringstream os;
  os << tensor({1.0f, 2.0f}, {2}).to(kFloat16);
  CHECK(contains(os.str(), "dtype=float16"));
  // Ops computed in float32 come back as float16: softmax, max, indexing.
  Tensor sm = softmax(zeros({4}, {kFloat16}), 0);
  CHECK(sm.dtype() == kFloat16);
  CHECK(sm.to_vector<double>() == std::vector<double>{0.25, 0.25, 0.25, 0.25});
  Tensor g = index_select(tensor({1.0f, 2.0f, 3.0f}, {3}).to(kFloat16), 0, tensor({int64_t{2}, int64_t{0}}, {2}));
  CHECK(g.dtype() == kFloat16);
  CHECK(g.to_vector<double>() == std::vector<double>{3, 1});
}
