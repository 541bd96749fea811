// data/idx_dataset: the real Fashion-MNIST files against values read independently with Python's
// gzip module, and small hand-made IDX files, good and broken, gzip'd and raw.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/api.h"
#include "tensor/api.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using namespace lockstep::data;
namespace fs = std::filesystem;

namespace {
using lockstep::testing::contains;

using lockstep::testing::error_of;


bool have_fashion_mnist() {
  return fs::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz") &&
         fs::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz");
}

// A fresh directory for this test's files.
fs::path temp_dir() {
  const char* bazel_tmp = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(bazel_tmp ? bazel_tmp : fs::temp_directory_path().string()) / "idx_test";
  fs::create_directories(dir);
  return dir;
}

// An IDX file's bytes: magic, big-endian dimensions, payload.
std::vector<uint8_t> idx_bytes(uint32_t magic, std::vector<uint32_t> dims, std::vector<uint8_t> payload) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::string write_raw(const std::string& name, const std::vector<uint8_t>& bytes) {
  std::string path = (temp_dir() / name).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

std::string write_gz(const std::string& name, const std::vector<uint8_t>& bytes) {
  std::string path = (temp_dir() / name).string();
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(gzwrite(f, bytes.data(), bytes.size()) == static_cast<int>(bytes.size()));
  gzclose(f);
  return path;
}

std::vector<uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Three 2 x 2 images and their labels.
const std::vector<uint8_t> kPixels = {0, 51, 102, 255, 255, 0, 0, 0, 1, 2, 3, 4};
const std::vector<uint8_t> kImages = idx_bytes(0x803, {3, 2, 2}, kPixels);
const std::vector<uint8_t> kLabels = idx_bytes(0x801, {3}, {7, 0, 9});

}  // namespace

// --- The real Fashion-MNIST ----------------------------------------------------------------------

TEST_CASE("Fashion-MNIST training split: shapes, labels and pixels as Python's gzip reads them") {
  if (!have_fashion_mnist()) {
    MESSAGE("skipped: Fashion-MNIST not found in ", kFashionMnistDir, " (apt install dataset-fashion-mnist)");
    return;
  }
  auto train = load_fashion_mnist(kFashionMnistDir, true, /*normalize=*/false);
  CHECK(train->size() == 60000);
  CHECK(train->inputs().shape() == Shape{60000, 784});
  CHECK(train->inputs().dtype() == kFloat32);
  CHECK(train->targets().shape() == Shape{60000});
  CHECK(train->targets().dtype() == kInt64);
  auto y = train->targets().to_vector<int64_t>();
  CHECK(std::vector<int64_t>(y.begin(), y.begin() + 10) == std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  CHECK(y.back() == 5);
  std::vector<int64_t> count(10);
  for (int64_t label : y) {
    REQUIRE(label >= 0);
    REQUIRE(label <= 9);
    ++count[label];
  }
  CHECK(count == std::vector<int64_t>(10, 6000));
  // Image 0: byte 99 is 13, byte 417 is 255 (its maximum), bytes sum to 76247.
  const float* x = train->inputs().data<float>();
  CHECK(x[0] == 0.f);
  CHECK(x[99] == doctest::Approx(13 / 255.0));
  CHECK(x[417] == 1.f);
  double sum0 = 0, total = 0;
  for (int i = 0; i < 784; ++i) sum0 += x[i];
  CHECK(sum0 == doctest::Approx(76247 / 255.0));
  // All pixels: sum 3431114169 / 255 (up to float rounding of each), a mean of 0.28604 (kFashionMnistMean).
  for (int64_t i = 0; i < 60000 * 784; ++i) total += x[i];
  CHECK(total / (60000.0 * 784) == doctest::Approx(3431114169.0 / 255 / 47040000).epsilon(1e-6));
  CHECK(total / (60000.0 * 784) == doctest::Approx(kFashionMnistMean).epsilon(1e-3));
  // Example 59999 (label 5), row 14: [0, 0, 0, 0, 9, 56, 144, ...].
  Example last = train->get(59999);
  CHECK(last.target.item<int64_t>() == 5);
  CHECK(last.input.data<float>()[14 * 28 + 5] == doctest::Approx(56 / 255.0));
  CHECK(last.input.data<float>()[14 * 28 + 6] == doctest::Approx(144 / 255.0));
}

TEST_CASE("Fashion-MNIST test split, standardized and unflattened") {
  if (!have_fashion_mnist()) {
    MESSAGE("skipped: Fashion-MNIST not found in ", kFashionMnistDir);
    return;
  }
  auto test = load_fashion_mnist(kFashionMnistDir, false);
  CHECK(test->inputs().shape() == Shape{10000, 784});
  auto y = test->targets().to_vector<int64_t>();
  CHECK(std::vector<int64_t>(y.begin(), y.begin() + 10) == std::vector<int64_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
  std::vector<int64_t> count(10);
  for (int64_t label : y) ++count[label];
  CHECK(count == std::vector<int64_t>(10, 1000));
  // Image 0's byte 577 is 255, byte 215 is 3: (x / 255 - 0.2860) / 0.3530.
  const float* x = test->inputs().data<float>();
  CHECK(x[577] == doctest::Approx((1.0 - 0.2860) / 0.3530));
  CHECK(x[215] == doctest::Approx((3 / 255.0 - 0.2860) / 0.3530));
  CHECK(x[0] == doctest::Approx(-0.2860 / 0.3530));

  auto images = load_fashion_mnist(kFashionMnistDir, false, false, /*flatten=*/false);
  CHECK(images->inputs().shape() == Shape{10000, 28, 28});
  double sum0 = 0;
  for (int i = 0; i < 784; ++i) sum0 += images->inputs().data<float>()[i];
  CHECK(sum0 == doctest::Approx(33456 / 255.0));
  // A batch of 64 straight from the loader.
  DataLoader loader(test, {.batch_size = 64});
  CHECK(loader.size() == 157);
  auto it = loader.begin();
  CHECK(it->input.shape() == Shape{64, 784});
  CHECK(it->target.to_vector<int64_t>()[0] == 9);
}

// --- Hand-made files -----------------------------------------------------------------------------

TEST_CASE("IdxDataset reads gzip'd and raw files, scales to [0, 1] and standardizes") {
  for (bool gz : {true, false}) {
    CAPTURE(gz);
    std::string images = gz ? write_gz("ok-images.gz", kImages) : write_raw("ok-images", kImages);
    std::string labels = gz ? write_gz("ok-labels.gz", kLabels) : write_raw("ok-labels", kLabels);
    IdxDataset plain(images, labels);
    CHECK(plain.inputs().shape() == Shape{3, 4});
    auto x = plain.inputs().to_vector<float>();
    for (size_t i = 0; i < kPixels.size(); ++i) CHECK(x[i] == doctest::Approx(kPixels[i] / 255.0));
    CHECK(plain.targets().to_vector<int64_t>() == std::vector<int64_t>{7, 0, 9});
    IdxDataset standardized(images, labels, 0.5, 0.25, /*flatten=*/false);
    CHECK(standardized.inputs().shape() == Shape{3, 2, 2});
    CHECK(standardized.inputs().to_vector<float>()[3] == doctest::Approx((1.0 - 0.5) / 0.25));
    CHECK(standardized.inputs().to_vector<float>()[0] == doctest::Approx(-2.0));
  }
  IdxArray a = read_idx(write_raw("ok-images", kImages), 3);
  CHECK(a.dims == Shape{3, 2, 2});
  CHECK(a.bytes == kPixels);
}

TEST_CASE("IdxDataset: broken files are errors that name the file and the problem") {
  std::string labels = write_gz("labels.gz", kLabels);
  std::string images = write_gz("images.gz", kImages);

  std::string missing = (temp_dir() / "no-such-file.gz").string();
  std::string e = error_of([&] { IdxDataset(missing, labels); });
  CHECK_MESSAGE(contains(e, missing + ": cannot open"), e);

  // The labels file where the images file belongs (and a file that is no IDX at all).
  e = error_of([&] { IdxDataset(labels, labels); });
  CHECK_MESSAGE(contains(e, labels + ": bad magic number 0x00000801, expected 0x00000803"), e);
  std::string text = write_raw("text.idx", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '\n'});
  e = error_of([&] { IdxDataset(images, text); });
  CHECK_MESSAGE(contains(e, text + ": bad magic number 0x68656c6c, expected 0x00000801"), e);

  // 3 images, 2 labels.
  std::string two = write_gz("two-labels.gz", idx_bytes(0x801, {2}, {1, 2}));
  e = error_of([&] { IdxDataset(images, two); });
  CHECK_MESSAGE(contains(e, images + " has 3 images but " + two + " has 2 labels"), e);

  // Payload shorter than the header promises, gzip'd and raw.
  std::vector<uint8_t> short_images = idx_bytes(0x803, {3, 2, 2}, std::vector<uint8_t>(kPixels.begin(), kPixels.end() - 3));
  for (std::string path : {write_gz("short.gz", short_images), write_raw("short", short_images)}) {
    e = error_of([&] { IdxDataset(path, labels); });
    CHECK_MESSAGE(contains(e, path + ": truncated: dimensions [3, 2, 2] need 12 bytes of data, the file has 9"), e);
  }
  // Dimensions too large to fit in any file (their product would overflow 64 bits).
  std::string huge = write_raw("huge", idx_bytes(0x803, {0xffffffff, 0xffffffff, 0xffffffff}, {1, 2, 3}));
  e = error_of([&] { read_idx(huge, 3); });
  CHECK_MESSAGE(contains(e, huge + ": truncated: dimensions [4294967295, 4294967295, 4294967295] need over 2^64 bytes"), e);
  // Bytes after the data.
  std::vector<uint8_t> long_labels = kLabels;
  long_labels.push_back(4);
  std::string extra = write_raw("long-labels", long_labels);
  e = error_of([&] { IdxDataset(images, extra); });
  CHECK_MESSAGE(contains(e, extra + ": 1 unexpected bytes after the 3 bytes of data"), e);
  // Headers cut short.
  std::string tiny = write_raw("tiny", {0, 0});
  e = error_of([&] { read_idx(tiny, 1); });
  CHECK_MESSAGE(contains(e, tiny + ": 2 bytes is too short for an IDX file"), e);
  std::string cut_header = write_raw("cut-header", {0, 0, 8, 3, 0, 0, 0, 3, 0, 0});
  e = error_of([&] { read_idx(cut_header, 3); });
  CHECK_MESSAGE(contains(e, cut_header + ": truncated header: 10 bytes, expected 16"), e);

  // A gzip file cut in half, one with a flipped byte in its compressed data, one with a bad checksum.
  std::vector<uint8_t> big(4000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 37 % 251);
  std::vector<uint8_t> gz = read_raw(write_gz("big.gz", idx_bytes(0x803, {10, 20, 20}, big)));
  std::string cut = write_raw("cut.gz", std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2));
  e = error_of([&] { read_idx(cut, 3); });
  CHECK_MESSAGE(contains(e, cut + ": the gzip stream is truncated or corrupt (zlib: unexpected end of file)"), e);
  std::vector<uint8_t> flipped = gz;
  flipped[flipped.size() / 2] ^= 0x5a;
  std::string bad = write_raw("flipped.gz", flipped);
  e = error_of([&] { read_idx(bad, 3); });
  CHECK_MESSAGE(contains(e, bad + ": "), e);
  CHECK_MESSAGE(contains(e, "corrupt"), e);
  std::vector<uint8_t> bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0x01;  // the CRC-32 in the gzip trailer
  std::string crc = write_raw("crc.gz", bad_crc);
  e = error_of([&] { read_idx(crc, 3); });
  CHECK_MESSAGE(contains(e, crc + ": unreadable or corrupt gzip data (zlib: incorrect data check)"), e);

  CHECK(contains(error_of([&] { IdxDataset(images, labels, 0, 0); }), "stddev must be positive, got 0"));
}
