// The TCPStore request parser without a network: every command round-trips, every prefix of a frame
// needs more bytes, malformed frames are errors with a reason, and the fuzzing corpus
// (tests/fuzz/corpus, seeds and any input tools/fuzz/fuzz_store.sh once crashed on) keeps the parser's
// properties (tests/fuzz/tcp_store_parse_check.h) in CI without libFuzzer.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "distributed/store/tcp_store_protocol.h"
#include "tests/fuzz/tcp_store_parse_check.h"

using namespace lockstep::dist::detail;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes u32(uint32_t v) { return {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)}; }

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

ParseResult parse(const Bytes& b) { return parse_request(b.data(), b.size()); }

std::string error_of(const Bytes& b) {
  ParseResult r = parse(b);
  REQUIRE(r.kind == ParseResult::kError);
  return r.error;
}

// The directory holding the corpus, from the test's runfiles.
std::filesystem::path corpus_dir() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir && workspace) return std::filesystem::path(srcdir) / workspace / "tests/fuzz/corpus";
  return "tests/fuzz/corpus";
}

Request make(Command c) {
  Request q;
  q.command = c;
  return q;
}

}  // namespace

TEST_CASE("parse_request: every command round-trips through encode_request") {
  std::vector<Request> requests;
  Request q = make(Command::kSet);
  q.key = "rank/0";
  q.value = {0, 255, 7};
  requests.push_back(q);
  q = make(Command::kGet);
  q.key = "";
  requests.push_back(q);
  q = make(Command::kAdd);
  q.key = "joined";
  q.delta = INT64_MIN;
  requests.push_back(q);
  q = make(Command::kCompareSet);
  q.key = "world_size";
  q.value = {};
  q.desired = {'4'};
  requests.push_back(q);
  q = make(Command::kWait);
  q.keys = {"a", "", "rank/1"};
  requests.push_back(q);
  q = make(Command::kCheck);
  requests.push_back(q);
  q = make(Command::kDelete);
  q.key = std::string(1000, 'k');
  requests.push_back(q);
  requests.push_back(make(Command::kNumKeys));
  q = make(Command::kHello);  // the job-token handshake: a nonce, then a MAC
  q.value = Bytes(32, 0xa5);
  requests.push_back(q);
  q = make(Command::kAuth);
  q.value = Bytes(32, 0x5a);
  requests.push_back(q);

  Bytes stream;
  for (const Request& r : requests) {
    CAPTURE(static_cast<int>(r.command));
    Bytes frame = encode_request(r);
    ParseResult p = parse(frame);
    REQUIRE(p.kind == ParseResult::kRequest);
    CHECK(p.consumed == frame.size());
    CHECK(p.request == r);
    CHECK(lockstep::dist::testing::check_parse(frame.data(), frame.size()) == 1);
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  // Back to back, as a client that pipelines would send them.
  CHECK(lockstep::dist::testing::check_parse(stream.data(), stream.size()) == static_cast<int>(requests.size()));
}

TEST_CASE("parse_request: prefixes need more, and the frame size is known once the prefix is in") {
  Request q = make(Command::kSet);
  q.key = "k";
  q.value = Bytes(100, 1);
  Bytes frame = encode_request(q);
  for (size_t k = 0; k < frame.size(); ++k) {
    ParseResult p = parse_request(frame.data(), k);
    REQUIRE(p.kind == ParseResult::kNeedMore);
    CHECK(p.frame_size == (k < 4 ? 0 : frame.size()));
  }
  // A frame at the limit is waited for, not refused.
  ParseResult big = parse(u32(kMaxMessageBytes));
  CHECK(big.kind == ParseResult::kNeedMore);
  CHECK(big.frame_size == 4 + size_t{kMaxMessageBytes});
}

TEST_CASE("parse_request: malformed frames are errors that say why") {
  CHECK(error_of(u32(0)) == "frame of 0 bytes (limit 67108864)");
  CHECK(error_of(u32(0xFFFFFFF0u)) == "frame of 4294967280 bytes (limit 67108864)");
  CHECK(error_of(u32(kMaxMessageBytes + 1)) == "frame of 67108865 bytes (limit 67108864)");
  CHECK(error_of(cat({u32(3), {0x77, 1, 2}})) == "unknown command 119");
  CHECK(error_of(cat({u32(1), {0}})) == "unknown command 0");
  CHECK(error_of(cat({u32(1), {11}})) == "unknown command 11");
  CHECK(error_of(cat({u32(6), {1, 0xff, 0xff, 0, 0, 'k'}})) == "TCPStore: malformed message: truncated");
  CHECK(error_of(cat({u32(4), {8, 'x', 'y', 'z'}})) == "TCPStore: malformed message: 3 trailing bytes");
  CHECK(error_of(cat({u32(3), {3, 0, 0}})) == "TCPStore: malformed message: truncated");
  // A key count that the frame cannot hold is refused before anything is allocated for it.
  CHECK(error_of(cat({u32(9), {5}, u32(0x40000000), u32(0)})) == "TCPStore: malformed message: truncated");
}

TEST_CASE("parse_request: the fuzzing corpus keeps the parser's properties") {
  auto dir = corpus_dir();
  REQUIRE_MESSAGE(std::filesystem::is_directory(dir), dir.string());
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path(), std::ios::binary);
    Bytes data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CAPTURE(entry.path().filename().string());
    CHECK_NOTHROW(lockstep::dist::testing::check_parse(data.data(), data.size()));
    ++files;
  }
  CHECK(files >= 20);
}

TEST_CASE("parse_request: seeded random bytes and mutated frames keep the parser's properties") {
  std::mt19937 rng(20240917);
  Request q = make(Command::kWait);
  q.keys = {"lockstep/1/rank/0", "lockstep/1/rank/1"};
  const Bytes valid = encode_request(q);
  for (int i = 0; i < 20000; ++i) {
    Bytes data;
    if (i % 2 == 0) {
      data.resize(rng() % 64);
      for (auto& b : data) b = static_cast<uint8_t>(rng());
    } else {
      data = valid;
      for (int flips = 1 + rng() % 3; flips > 0; --flips) data[rng() % data.size()] = static_cast<uint8_t>(rng());
      data.resize(rng() % (data.size() + 8), 0);
    }
    CHECK_NOTHROW(lockstep::dist::testing::check_parse(data.data(), data.size()));
  }
}
