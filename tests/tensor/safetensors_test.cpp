// Tests of the safetensors checkpoint format: round trips, a file written by Python's safetensors,
// and clear errors for truncated and corrupt files.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "tensor/api.h"
#include "tensor/safetensors.h"

using namespace lockstep;

static std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

static std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

static void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

static std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

TEST_CASE("round trip keeps names, order, dtypes, shapes, values and metadata") {
  manual_seed(0);
  TensorList in{{"0.weight", randn({3, 4})}, {"0.bias", randn({4}, kFloat64)}, {"steps", arange(5)},
                {"scalar", scalar_tensor(2.5)}, {"empty", zeros({0, 3})},
                {"flag", internal::to_dtype(tensor({1.0, 0.0, 1.0}, {3}), kBool)},
                {"bytes", internal::to_dtype(tensor({0.0, 7.0, 255.0}, {3}), kUInt8)},
                {"half", internal::to_dtype(tensor({1.5, -2.0}, {2}), kBFloat16)},
                {"fp16", internal::to_dtype(tensor({65504.0, -6.103515625e-05, 5.960464477539063e-08}, {3}), kFloat16)},
                {"i8", internal::to_dtype(tensor({-128.0, 127.0}, {2}), kInt8)},
                {"i16", internal::to_dtype(tensor({-32768.0, 1234.0}, {2}), kInt16)},
                {"i32", internal::to_dtype(tensor({-2147483648.0, 7.0}, {2}), kInt32)}};
  std::string path = temp_path("round.safetensors");
  save_safetensors(path, in, {{"epoch", "7"}});
  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    CHECK(f.tensors[i].first == in[i].first);
    CHECK(f.tensors[i].second.dtype() == in[i].second.dtype());
    CHECK(f.tensors[i].second.shape() == in[i].second.shape());
    CHECK(f.tensors[i].second.to_vector<double>() == in[i].second.to_vector<double>());
  }
  CHECK(f.metadata.at("epoch") == "7");
  // The header is padded to a multiple of 8 bytes, as the format requires.
  std::string bytes = read_bytes(path);
  uint64_t len;
  std::memcpy(&len, bytes.data(), 8);
  CHECK(len % 8 == 0);
}

TEST_CASE("views are written as their elements in row-major order, not as their storage") {
  Tensor base = internal::view(arange(12), {3, 4});
  TensorList in{{"t", internal::transpose(base, 0, 1)},
                {"col", internal::select(base, 1, 2)},
                {"every_other", internal::slice(base, 1, 0, 4, 2)}};
  std::string path = temp_path("views.safetensors");
  save_safetensors(path, in);
  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].second.shape() == Shape{4, 3});
  CHECK(f.tensors[0].second.to_vector<int64_t>() == std::vector<int64_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(f.tensors[1].second.to_vector<int64_t>() == std::vector<int64_t>{2, 6, 10});
  CHECK(f.tensors[2].second.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4, 6, 8, 10});
}

TEST_CASE("reads a file written by Python's safetensors") {
  // safetensors.numpy.save_file({'w': [[1.5, -2], [3.25, 4]] float32, 'idx': [7, -1] int64},
  //                             metadata={'epoch': '3'})
  std::string path = temp_path("py.safetensors");
  write_bytes(path, from_hex(
      "90000000000000007b225f5f6d657461646174615f5f223a7b2265706f6368223a2233227d2c22696478223a7b226474797065223a2249"
      "3634222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c31365d7d2c2277223a7b226474797065223a224633"
      "32222c227368617065223a5b322c325d2c22646174615f6f666673657473223a5b31362c33325d7d7d200700000000000000ffffffffff"
      "ffffff0000c03f000000c00000504000008040"));
  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].first == "idx");
  CHECK(f.tensors[0].second.to_vector<int64_t>() == std::vector<int64_t>{7, -1});
  CHECK(f.tensors[1].first == "w");
  CHECK(f.tensors[1].second.shape() == Shape{2, 2});
  CHECK(f.tensors[1].second.to_vector<float>() == std::vector<float>{1.5f, -2.f, 3.25f, 4.f});
  CHECK(f.metadata.at("epoch") == "3");
}

TEST_CASE("reads Python's I8, I16 and I32 tensors") {
  // safetensors.numpy.save({'a': [-128, 127] int8, 'b': [-32768, 1234] int16, 'c': [-2**31, 7] int32})
  std::string path = temp_path("py_ints.safetensors");
  write_bytes(path, from_hex(
      "a8000000000000007b2263223a7b226474797065223a22493332222c227368617065223a5b325d2c22646174615f6f6666736574"
      "73223a5b302c385d7d2c2262223a7b226474797065223a22493136222c227368617065223a5b325d2c22646174615f6f66667365"
      "7473223a5b382c31325d7d2c2261223a7b226474797065223a224938222c227368617065223a5b325d2c22646174615f6f666673"
      "657473223a5b31322c31345d7d7d20202020202000000080070000000080d204807f"));
  SafetensorsFile f = load_safetensors(path);
  REQUIRE(f.tensors.size() == 3);
  std::map<std::string, Tensor> by_name(f.tensors.begin(), f.tensors.end());
  CHECK(by_name.at("a").dtype() == kInt8);
  CHECK(by_name.at("a").to_vector<int64_t>() == std::vector<int64_t>{-128, 127});
  CHECK(by_name.at("b").dtype() == kInt16);
  CHECK(by_name.at("b").to_vector<int64_t>() == std::vector<int64_t>{-32768, 1234});
  CHECK(by_name.at("c").dtype() == kInt32);
  CHECK(by_name.at("c").to_vector<int32_t>() == std::vector<int32_t>{-2147483647 - 1, 7});
}

TEST_CASE("truncated and corrupt files are clear errors naming the file") {
  std::string good = temp_path("good.safetensors");
  save_safetensors(good, {{"w", ones({16})}});
  std::string bytes = read_bytes(good);
  std::string bad = temp_path("bad.safetensors");

  write_bytes(bad, bytes.substr(0, 5));
  CHECK_THROWS_WITH_AS(load_safetensors(bad), doctest::Contains("is truncated (5 bytes, no header length)"), Error);
  write_bytes(bad, bytes.substr(0, bytes.size() - 4));
  CHECK_THROWS_WITH_AS(load_safetensors(bad), doctest::Contains("is corrupt or truncated: tensor 'w' [16] float32"), Error);
  std::string huge = bytes;
  huge[7] = 0x7f;  // an absurd header length
  write_bytes(bad, huge);
  CHECK_THROWS_WITH_AS(load_safetensors(bad), doctest::Contains("header length"), Error);
  std::string garbled = bytes;
  garbled[8] = '!';
  write_bytes(bad, garbled);
  CHECK_THROWS_WITH_AS(load_safetensors(bad), doctest::Contains("corrupt JSON header"), Error);
  CHECK_THROWS_WITH_AS(load_safetensors(temp_path("missing.safetensors")), doctest::Contains("cannot open"), Error);
  CHECK_THROWS_WITH_AS(save_safetensors(good, {{"a", ones({1})}, {"a", ones({1})}}), doctest::Contains("duplicate"), Error);
  // A failed save leaves the previous file as it was.
  CHECK(read_bytes(good) == bytes);
  CHECK_THROWS_AS(save_safetensors(temp_path("no/such/dir/x.safetensors"), {{"a", ones({1})}}), Error);
}
