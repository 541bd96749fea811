// int8, int16 and int32 as PyTorch has them: promotion, arithmetic that wraps in the dtype itself,
// conversions, reductions and scans taken in int64, indexing and scatters, reading elements back.
// Values from PyTorch 2.15.
#include <doctest/doctest.h>

#include <cstdint>
#include <sstream>
#include <vector>

#include "autograd/api.h"
#include "tests/util/test_util.h"

namespace {

using namespace lockstep;

Tensor ints(const std::vector<int64_t>& v, Dtype d, const Shape& shape = {}) {
  Tensor t = tensor(v, shape.empty() ? Shape{static_cast<int64_t>(v.size())} : shape).to(d);
  REQUIRE(t.dtype() == d);
  return t;
}

std::vector<int64_t> values(const Tensor& t) { return t.to_vector<int64_t>(); }

}  // namespace

TEST_CASE("int8, int16, int32: names, sizes and PyTorch's promotion") {
  CHECK(dtype_name(kInt8) == std::string("int8"));
  CHECK(dtype_name(kInt16) == std::string("int16"));
  CHECK(dtype_name(kInt32) == std::string("int32"));
  CHECK(kChar == kInt8);
  CHECK(kShort == kInt16);
  CHECK(kInt == kInt32);
  CHECK(element_size(kInt8) == 1);
  CHECK(element_size(kInt16) == 2);
  CHECK(element_size(kInt32) == 4);
  CHECK_FALSE(is_floating_point(kInt32));
  CHECK(promote_types(kInt8, kUInt8) == kInt16);
  CHECK(promote_types(kUInt8, kInt8) == kInt16);
  CHECK(promote_types(kInt8, kInt16) == kInt16);
  CHECK(promote_types(kInt32, kInt64) == kInt64);
  CHECK(promote_types(kInt32, kBool) == kInt32);
  CHECK(promote_types(kInt32, kBFloat16) == kBFloat16);
  CHECK(promote_types(kInt16, kFloat32) == kFloat32);

  Tensor a = ints({1, 2}, kInt8), u = ints({1, 2}, kUInt8);
  CHECK((a + u).dtype() == kInt16);
  CHECK((a + 3.5).dtype() == kFloat32);  // a fractional scalar makes an integer tensor float32
  CHECK((ints({1, 2}, kInt16) + 3).dtype() == kInt16);
  CHECK((ints({1}, kInt32) + ints({1}, kInt64)).dtype() == kInt64);
}

TEST_CASE("integer arithmetic wraps in the dtype; division as PyTorch's") {
  Tensor a = ints({100, -100, 127, -128}, kInt8), b = ints({100, 100, 1, -1}, kInt8);
  CHECK(values(a + b) == std::vector<int64_t>{-56, 0, -128, 127});
  CHECK(values(a * b) == std::vector<int64_t>{16, -16, 127, -128});
  CHECK(values(a - b) == std::vector<int64_t>{0, 56, 126, -127});
  CHECK((a + b).dtype() == kInt8);
  CHECK(values(ints({2147483647}, kInt32) + 1) == std::vector<int64_t>{-2147483648LL});

  Tensor s = ints({7, -7}, kInt16);
  Tensor q = s / 2;  // true division: float32
  CHECK(q.dtype() == kFloat32);
  CHECK(q.to_vector<float>() == std::vector<float>{3.5f, -3.5f});
  CHECK(values(remainder(s, ints({3, 3}, kInt16))) == std::vector<int64_t>{1, 2});
  CHECK(values(abs(ints({-5, 5}, kInt8))) == std::vector<int64_t>{5, 5});
  CHECK(values(maximum(s, ints({0, 0}, kInt16))) == std::vector<int64_t>{7, 0});
  CHECK((s < 0).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1});
}

TEST_CASE("conversions to and from the narrow integers truncate toward zero") {
  CHECK(values(tensor({3.7f, -3.7f, 100.0f}).to(kInt8)) == std::vector<int64_t>{3, -3, 100});
  CHECK(values(tensor({3.7, -3.7, 30000.0}).to(kInt16)) == std::vector<int64_t>{3, -3, 30000});
  CHECK(tensor({-2.5f, 1e9f}).to(kInt32).to_vector<int32_t>() == std::vector<int32_t>{-2, 1000000000});
  Tensor i = ints({-3, 40000}, kInt32);
  CHECK(i.to(kFloat32).to_vector<float>() == std::vector<float>{-3.0f, 40000.0f});
  CHECK(i.to(kBFloat16).to(kFloat64).to_vector<double>() == std::vector<double>{-3.0, 39936.0});  // rounded to 8 bits
  CHECK(i.to(kInt16).to_vector<int16_t>() == std::vector<int16_t>{-3, static_cast<int16_t>(40000 - 65536)});
  CHECK(ints({-7}, kInt16).item<int>() == -7);
  CHECK(ints({-7}, kInt8).item<int8_t>() == -7);
  CHECK(ints({5}, kInt32).item().to<int64_t>() == 5);
  std::ostringstream os;
  os << ints({1, -2}, kInt32);
  CHECK(testing::contains(os.str(), "int32"));
}

TEST_CASE("sums, products and scans of the narrow integers are int64; max and min keep the dtype") {
  Tensor x = ints({1000, 2000, 30000, -5}, kInt16, {2, 2});
  Tensor total = x.sum();
  CHECK(total.dtype() == kInt64);
  CHECK(total.item<int64_t>() == 32995);
  CHECK(values(x.sum(0)) == std::vector<int64_t>{31000, 1995});
  CHECK(values(x.prod(1)) == std::vector<int64_t>{2000000, -150000});
  CHECK(x.prod(1).dtype() == kInt64);
  CHECK(x.max().dtype() == kInt16);
  CHECK(x.max().item<int64_t>() == 30000);
  CHECK(values(x.argmax(1)) == std::vector<int64_t>{1, 0});
  Tensor c = x.cumsum(1);
  CHECK(c.dtype() == kInt64);
  CHECK(values(c) == std::vector<int64_t>{1000, 3000, 30000, 29995});
  CHECK(ints({200, 100}, kUInt8).sum().item<int64_t>() == 300);  // no wrap: int64, as PyTorch's
  CHECK(ints({1, 2}, kInt8).sum(0, true).dtype() == kInt64);
}

TEST_CASE("indexing, gathers and scatters on the narrow integers") {
  Tensor t = ints({10, 20, 30, 40}, kInt32);
  Tensor idx = tensor(std::vector<int64_t>{3, 0, 3});
  CHECK(values(index_select(t, 0, idx)) == std::vector<int64_t>{40, 10, 40});
  CHECK(index_select(t, 0, idx).dtype() == kInt32);
  CHECK(values(index_select(t, 0, idx.to(kInt32))) == std::vector<int64_t>{40, 10, 40});  // an int32 index
  CHECK(values(bincount(ints({1, 3, 1}, kInt16))) == std::vector<int64_t>{0, 2, 0, 1});
  Tensor acc = ints({0, 0, 0, 0}, kInt16).scatter_add(0, idx, ints({30000, 1, 30000}, kInt16));
  CHECK(values(acc) == std::vector<int64_t>{1, 0, 0, 60000 - 65536});  // wraps in int16
  Tensor b = ints({1, 2, 3, 4, 5, 6}, kInt8, {2, 3});
  CHECK(values(b.t().contiguous()) == std::vector<int64_t>{1, 4, 2, 5, 3, 6});
  CHECK(values(cat({b, b}, 0).sum(1)) == std::vector<int64_t>{6, 15, 6, 15});
  CHECK(values(where(b > 3, b, ints({0}, kInt8))) == std::vector<int64_t>{0, 0, 0, 4, 5, 6});
  Tensor z = zeros({3}, TensorOptions(kInt32));
  z.fill_(7);
  CHECK(z.to_vector<int32_t>() == std::vector<int32_t>{7, 7, 7});
}
