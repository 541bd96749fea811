// TCPStore requests: the frame decoder the server runs on untrusted bytes, and the client's encoder.
#include "distributed/store/tcp_store_protocol.h"

#include <exception>

namespace lockstep::dist::detail {

ParseResult parse_request(const uint8_t* data, size_t size) {
  ParseResult out;
  if (size < 4) return out;
  uint32_t len;
  std::memcpy(&len, data, 4);
  if (len == 0 || len > kMaxMessageBytes) {
    out.kind = ParseResult::kError;
    out.error = "frame of " + std::to_string(len) + " bytes (limit " + std::to_string(kMaxMessageBytes) + ")";
    return out;
  }
  if (size - 4 < len) {
    out.frame_size = 4 + static_cast<size_t>(len);
    return out;
  }
  try {
    FrameReader r(data + 4, len);
    Request& q = out.request;
    uint8_t command = r.u8();
    LOCKSTEP_CHECK(command >= static_cast<uint8_t>(Command::kSet) && command <= static_cast<uint8_t>(Command::kAuth),
                   "unknown command ", static_cast<int>(command));
    q.command = static_cast<Command>(command);
    switch (q.command) {
      case Command::kSet:
        q.key = r.str();
        q.value = r.blob();
        break;
      case Command::kGet:
      case Command::kDelete:
        q.key = r.str();
        break;
      case Command::kAdd:
        q.key = r.str();
        q.delta = r.i64();
        break;
      case Command::kCompareSet:
        q.key = r.str();
        q.value = r.blob();
        q.desired = r.blob();
        break;
      case Command::kWait:
      case Command::kCheck:
        q.keys = r.str_list();
        break;
      case Command::kNumKeys:
        break;
      case Command::kHello:
      case Command::kAuth:
        q.value = r.blob();
        break;
    }
    r.expect_end();
  } catch (const std::exception& e) {  // lockstep::Error for bad bytes; bad_alloc cannot outgrow the frame
    out = ParseResult{};
    out.kind = ParseResult::kError;
    out.error = e.what();
    return out;
  }
  out.kind = ParseResult::kRequest;
  out.consumed = 4 + static_cast<size_t>(len);
  return out;
}

std::vector<uint8_t> encode_request(const Request& r) {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(r.command));
  switch (r.command) {
    case Command::kSet:
      w.str(r.key).blob(r.value);
      break;
    case Command::kGet:
    case Command::kDelete:
      w.str(r.key);
      break;
    case Command::kAdd:
      w.str(r.key).i64(r.delta);
      break;
    case Command::kCompareSet:
      w.str(r.key).blob(r.value).blob(r.desired);
      break;
    case Command::kWait:
    case Command::kCheck:
      write_keys(w, r.keys);
      break;
    case Command::kNumKeys:
      break;
    case Command::kHello:
    case Command::kAuth:
      w.blob(r.value);
      break;
  }
  return w.finish();
}

}  // namespace lockstep::dist::detail
