// The properties the TCPStore request parser must have on any bytes, shared by the libFuzzer target
// (tcp_store_fuzz.cpp) and the corpus regression test (tcp_store_protocol_test.cpp). Violations throw
// std::logic_error, which libFuzzer reports as a crash and doctest as a failure.
//
// The bytes are read as one connection's stream: frames are parsed one after another until the
// parser needs more bytes or reports an error, as the server does. For each decoded request:
//   - it used at most the bytes given and at least a length prefix and a command;
//   - encode_request() gives back exactly the bytes it was parsed from (the format has one encoding);
//   - every strict prefix of the frame is "need more", and a "need more" that has seen the length
//     prefix says how big the frame is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/store/tcp_store_protocol.h"

namespace lockstep::dist::testing {

#define PARSE_CHECK(cond, what)                                                               \
  do {                                                                                        \
    if (!(cond)) throw std::logic_error(std::string("parser property violated: ") + (what)); \
  } while (0)

// Returns how many frames were decoded.
inline int check_parse(const uint8_t* data, size_t size) {
  using detail::ParseResult;
  int frames = 0;
  size_t off = 0;
  for (;;) {
    const uint8_t* p = data + off;
    const size_t n = size - off;
    ParseResult r = detail::parse_request(p, n);
    switch (r.kind) {
      case ParseResult::kNeedMore:
        PARSE_CHECK(r.consumed == 0, "need-more consumed bytes");
        if (n >= 4) {
          PARSE_CHECK(r.frame_size > n, "need-more although the whole frame is there");
          PARSE_CHECK(r.frame_size <= 4 + size_t{detail::kMaxMessageBytes}, "need-more for a frame over the limit");
        } else {
          PARSE_CHECK(r.frame_size == 0, "frame size known before the length prefix");
        }
        return frames;
      case ParseResult::kError:
        PARSE_CHECK(!r.error.empty(), "an error without a message");
        PARSE_CHECK(n >= 4, "an error before the length prefix is in");
        return frames;
      case ParseResult::kRequest: {
        PARSE_CHECK(r.consumed >= 5 && r.consumed <= n, "consumed " + std::to_string(r.consumed) + " of " +
                                                            std::to_string(n) + " bytes");
        std::vector<uint8_t> again = detail::encode_request(r.request);
        PARSE_CHECK(again == std::vector<uint8_t>(p, p + r.consumed), "encode(parse(frame)) differs from the frame");
        // Every strict prefix needs more bytes (all of them for small frames, the ends of big ones).
        for (size_t k = 0; k < r.consumed; ++k) {
          if (r.consumed > 512 && k == 8) k = r.consumed - 8;
          ParseResult prefix = detail::parse_request(p, k);
          PARSE_CHECK(prefix.kind == ParseResult::kNeedMore, "a " + std::to_string(k) + "-byte prefix of a " +
                                                                 std::to_string(r.consumed) + "-byte frame is not need-more");
          PARSE_CHECK(k < 4 || prefix.frame_size == r.consumed, "need-more names the wrong frame size");
        }
        ++frames;
        off += r.consumed;
        break;
      }
    }
  }
}

#undef PARSE_CHECK

}  // namespace lockstep::dist::testing
