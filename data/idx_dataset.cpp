// IDX reading (raw or gzip'd, decompressed with zlib) and IdxDataset.
#include "data/idx_dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/check.h"
#include "common/file_io.h"

namespace lockstep::data {
namespace {

std::string hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint32_t big_endian32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// The whole file (common/file_io.h), decompressed when it is gzip'd (it starts with gzip's magic
// 1f 8b), as zlib's gzread would: concatenated members in turn.
std::vector<uint8_t> read_file(const std::string& path) {
  const std::string file = lockstep::read_file(path, "read_idx");
  const auto* in = reinterpret_cast<const Bytef*>(file.data());
  if (file.size() < 2 || in[0] != 0x1f || in[1] != 0x8b) return std::vector<uint8_t>(in, in + file.size());
  z_stream zs{};
  LOCKSTEP_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "read_idx: ", path, ": zlib could not start (out of memory)");
  std::unique_ptr<z_stream, int (*)(z_streamp)> guard(&zs, inflateEnd);
  zs.next_in = const_cast<Bytef*>(in);
  zs.avail_in = static_cast<uInt>(file.size());  // IDX files are far below 4 GiB
  std::vector<uint8_t> out;
  constexpr size_t kChunk = 1 << 22;
  for (;;) {
    const size_t have = out.size();
    out.resize(have + kChunk);
    zs.next_out = out.data() + have;
    zs.avail_out = static_cast<uInt>(kChunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(have + kChunk - zs.avail_out);
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      LOCKSTEP_CHECK(inflateReset(&zs) == Z_OK, "read_idx: ", path, ": zlib could not read the next gzip member");
      continue;
    }
    LOCKSTEP_CHECK(rc == Z_OK || rc == Z_BUF_ERROR, "read_idx: ", path, ": unreadable or corrupt gzip data (zlib: ",
                   zs.msg ? zs.msg : zError(rc), ")");
    // No progress with input left to read would loop for ever; with none left, the stream was cut.
    LOCKSTEP_CHECK(zs.avail_in > 0 && rc == Z_OK, "read_idx: ", path,
                   ": the gzip stream is truncated or corrupt (zlib: unexpected end of file)");
  }
  return out;
}

}  // namespace

IdxArray read_idx(const std::string& path, int ndims) {
  std::vector<uint8_t> raw = read_file(path);
  const uint32_t expected = 0x800u | static_cast<uint32_t>(ndims);
  LOCKSTEP_CHECK(raw.size() >= 4, "read_idx: ", path, ": ", raw.size(), " bytes is too short for an IDX file");
  const uint32_t magic = big_endian32(raw.data());
  LOCKSTEP_CHECK(magic == expected, "read_idx: ", path, ": bad magic number ", hex32(magic), ", expected ",
                 hex32(expected), " (unsigned bytes, ", ndims, " dimensions)",
                 (magic >> 8) == 0x08 ? "; is this the other file of the pair?" : "; is this an IDX file?");
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  LOCKSTEP_CHECK(raw.size() >= header, "read_idx: ", path, ": truncated header: ", raw.size(), " bytes, expected ",
                 header);
  IdxArray a;
  const size_t payload = raw.size() - header;
  uint64_t expected_bytes = 1;
  bool overflow = false, empty = false;  // overflow: the product needs more than 64 bits
  for (int d = 0; d < ndims; ++d) {
    uint32_t size = big_endian32(raw.data() + 4 + 4 * d);
    a.dims.push_back(size);
    overflow |= __builtin_mul_overflow(expected_bytes, uint64_t(size), &expected_bytes);
    empty |= size == 0;
  }
  if (empty) expected_bytes = 0, overflow = false;
  LOCKSTEP_CHECK(!overflow && expected_bytes <= payload, "read_idx: ", path, ": truncated: dimensions ", a.dims,
                 " need ", overflow ? std::string("over 2^64") : std::to_string(expected_bytes),
                 " bytes of data, the file has ", payload);
  LOCKSTEP_CHECK(expected_bytes == payload, "read_idx: ", path, ": ", payload - expected_bytes,
                 " unexpected bytes after the ", expected_bytes, " bytes of data for dimensions ", a.dims);
  raw.erase(raw.begin(), raw.begin() + header);
  a.bytes = std::move(raw);
  return a;
}

namespace {

// The images as float32 [N, rows * cols] (or [N, rows, cols]) standardized, and the labels as int64 [N].
std::pair<Tensor, Tensor> load_pair(const std::string& images_path, const std::string& labels_path, double mean,
                                    double stddev, bool flatten) {
  LOCKSTEP_CHECK(stddev > 0, "IdxDataset: stddev must be positive, got ", stddev);
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  const int64_t n = images.dims[0], rows = images.dims[1], cols = images.dims[2];
  LOCKSTEP_CHECK(n == labels.dims[0], "IdxDataset: ", images_path, " has ", n, " images but ", labels_path, " has ",
                 labels.dims[0], " labels");
  // Each byte's value through a 256-entry table: (v / 255 - mean) / stddev.
  float table[256];
  for (int v = 0; v < 256; ++v) table[v] = static_cast<float>((v / 255.0 - mean) / stddev);
  Tensor x(flatten ? Shape{n, rows * cols} : Shape{n, rows, cols}, kFloat32, Device::cpu());
  float* px = x.data<float>();
  for (size_t i = 0; i < images.bytes.size(); ++i) px[i] = table[images.bytes[i]];
  Tensor y(Shape{n}, kInt64, Device::cpu());
  int64_t* py = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) py[i] = labels.bytes[i];
  return {x, y};
}

}  // namespace

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path, double mean, double stddev,
                       bool flatten)
    : IdxDataset(load_pair(images_path, labels_path, mean, stddev, flatten)) {}

std::shared_ptr<IdxDataset> load_fashion_mnist(const std::string& dir, bool train, bool normalize, bool flatten) {
  auto file = [&](const char* kind) {
    std::string base = dir + "/" + (train ? "train" : "t10k") + "-" + kind + "-ubyte";
    return std::filesystem::exists(base + ".gz") || !std::filesystem::exists(base) ? base + ".gz" : base;
  };
  return std::make_shared<IdxDataset>(file("images-idx3"), file("labels-idx1"), normalize ? kFashionMnistMean : 0.0,
                                      normalize ? kFashionMnistStd : 1.0, flatten);
}

}  // namespace lockstep::data
