// TCPStore wire format, shared by the client (tcp_store.cpp) and the server (tcp_store_server.cpp).
//
// Every message is a frame: u32 body length (little-endian), then the body. Integers are
// little-endian; a string or byte value is a u32 length and the bytes.
//   request:  u8 Command, then its arguments
//     kSet key value | kGet key | kAdd key i64 | kCompareSet key expected desired
//     kWait u32 n, n keys | kCheck u32 n, n keys | kDelete key | kNumKeys
//     kHello client_nonce | kAuth client_mac                       (the job-token handshake, below)
//   response: u8 Status; on kOk the result, on kError a message string
//     kSet, kWait: nothing | kGet, kCompareSet: value | kAdd, kNumKeys: i64 | kCheck, kDelete: u8
//     kHello: server_nonce | kAuth: server_mac
// With a job token (distributed/net/job_token.h) a client's first two requests are the handshake:
//   kHello(cn)                                  ->  kOk sn                          sn: fresh per connection
//   kAuth(HMAC(token, kClientProof || sn || cn))  ->  kOk HMAC(token, kServerProof || cn || sn)
// The client proves the token first; the server proves it back only to a client that has. Any other
// first request, or a wrong proof, gets kError kRefusedJobToken and the connection closes.
// A server without a token answers kHello with kError; a client without one sends no kHello.
// A frame longer than kMaxMessageBytes, or a body that does not parse, ends the connection.
//
// parse_request() is the server's whole view of the bytes a client sends: a pure function from a
// buffer to "a request", "need more bytes" or "malformed", fuzzed by tests/fuzz/tcp_store_fuzz.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/check.h"

namespace lockstep::dist::detail {

inline constexpr uint32_t kMaxMessageBytes = 64u << 20;

enum class Command : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait, kCheck, kDelete, kNumKeys, kHello, kAuth };

// The job-token handshake's HMAC contexts (one per direction, so neither proof answers for the other)
// and what the server says when it refuses a peer.
inline constexpr const char* kServerProof = "lockstep tcpstore v1 server";
inline constexpr const char* kClientProof = "lockstep tcpstore v1 client";
inline constexpr const char* kRefusedJobToken = "refused: wrong or missing job token";
// Until a peer has proven the token, a frame longer than this is refused unread (a handshake frame is 41 bytes).
inline constexpr uint32_t kMaxHandshakeFrame = 256;
enum class Status : uint8_t { kOk = 0, kError = 1 };

// Builds one frame; the length prefix is filled in by finish().
class FrameWriter {
 public:
  FrameWriter() : buf_(4) {}
  FrameWriter& u8(uint8_t v) { return raw(&v, 1); }
  FrameWriter& u32(uint32_t v) { return raw(&v, 4); }
  FrameWriter& i64(int64_t v) { return raw(&v, 8); }
  FrameWriter& bytes(const void* data, size_t n) {
    LOCKSTEP_CHECK(n <= kMaxMessageBytes, "TCPStore: a value of ", n, " bytes exceeds the ", kMaxMessageBytes,
                   "-byte message limit");
    u32(static_cast<uint32_t>(n));
    return raw(data, n);
  }
  FrameWriter& str(std::string_view s) { return bytes(s.data(), s.size()); }
  FrameWriter& blob(const std::vector<uint8_t>& v) { return bytes(v.data(), v.size()); }
  std::vector<uint8_t> finish() {
    size_t body = buf_.size() - 4;
    LOCKSTEP_CHECK(body <= kMaxMessageBytes, "TCPStore: a message of ", body, " bytes exceeds the ",
                   kMaxMessageBytes, "-byte limit");
    uint32_t n = static_cast<uint32_t>(body);
    std::memcpy(buf_.data(), &n, 4);  // lockstep targets little-endian x86-64 and aarch64 only
    return std::move(buf_);
  }

 private:
  FrameWriter& raw(const void* data, size_t n) {
    // resize + memcpy rather than insert(): GCC 12 reports a false -Warray-bounds on the latter.
    size_t old = buf_.size();
    buf_.resize(old + n);
    if (n) std::memcpy(buf_.data() + old, data, n);
    return *this;
  }
  std::vector<uint8_t> buf_;
};

// Reads one frame body; any read past the end throws, so a truncated or garbled body is an Error.
class FrameReader {
 public:
  FrameReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t u8() { return pod<uint8_t>(); }
  uint32_t u32() { return pod<uint32_t>(); }
  int64_t i64() { return pod<int64_t>(); }
  std::string str() {
    uint32_t n = u32();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<uint8_t> blob() {
    uint32_t n = u32();
    need(n);
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n;
    return v;
  }
  std::vector<std::string> str_list() {
    uint32_t n = u32();
    need(static_cast<size_t>(n) * 4);  // each key takes at least its length prefix
    std::vector<std::string> keys;
    keys.reserve(n);
    for (uint32_t i = 0; i < n; ++i) keys.push_back(str());
    return keys;
  }
  void expect_end() const { LOCKSTEP_CHECK(p_ == end_, "TCPStore: malformed message: ", end_ - p_, " trailing bytes"); }

 private:
  void need(size_t n) const {
    LOCKSTEP_CHECK(static_cast<size_t>(end_ - p_) >= n, "TCPStore: malformed message: truncated");
  }
  template <typename T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

inline FrameWriter& write_keys(FrameWriter& w, const std::vector<std::string>& keys) {
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  return w;
}

// One decoded request. Which fields a command uses:
//   kSet key value | kGet key | kAdd key delta | kCompareSet key value(expected) desired
//   kWait keys | kCheck keys | kDelete key | kNumKeys | kHello value(nonce) | kAuth value(mac)
struct Request {
  Command command = Command::kNumKeys;
  std::string key;
  std::vector<uint8_t> value;
  std::vector<uint8_t> desired;
  int64_t delta = 0;
  std::vector<std::string> keys;
  bool operator==(const Request&) const = default;
};

struct ParseResult {
  enum Kind { kRequest, kNeedMore, kError } kind = kNeedMore;
  Request request;    // kRequest
  size_t consumed = 0;  // kRequest: the frame's size, length prefix included
  size_t frame_size = 0;  // kNeedMore: the whole frame's size once its length prefix is in (else 0)
  std::string error;  // kError: what is wrong, e.g. "frame of 4294967280 bytes (limit 67108864)"
};

// Decodes the first frame of data[0, size). Never throws and never reads past `size`; allocates at
// most what the frame's own bytes describe (so at most about kMaxMessageBytes). A frame whose length
// prefix is 0 or over kMaxMessageBytes is an error as soon as the prefix is in, without waiting for
// the body.
ParseResult parse_request(const uint8_t* data, size_t size);

// The frame parse_request decodes back into `r` (the client's encoder).
std::vector<uint8_t> encode_request(const Request& r);

}  // namespace lockstep::dist::detail
