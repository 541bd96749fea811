// Store: the key-value rendezvous every process group bootstraps from (c10d's Store). Ranks publish
// addresses and counters under string keys; a reader blocks until a key appears or the store's timeout
// passes. Implementations: TCPStore (tcp_store.h), FileStore (file_store.h), PrefixStore (prefix_store.h).
//
// Contract shared by every implementation:
//   - values are bytes; the string overloads are conveniences over the same bytes;
//   - get/wait block until the key(s) exist, and throw lockstep::Error naming the key and the timeout;
//   - add keeps a counter as decimal text (as PyTorch does), so get() of a counter reads "42";
//   - compare_set follows c10d: a missing key with an empty `expected` is created; otherwise the value
//     is replaced only when it equals `expected`; the value after the call is returned (for a missing
//     key with a non-empty `expected`, `expected` itself is returned, as c10d does);
//   - every method is safe to call from several threads.
#pragma once

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/check.h"
#include "common/deadline.h"

namespace lockstep::dist {

// The deadline vocabulary (common/deadline.h), also reachable as dist:: names.
using ::lockstep::Clock;
using ::lockstep::Deadline;
using ::lockstep::deadline_after;
using ::lockstep::TimeoutError;

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{300'000};

  explicit Store(std::chrono::milliseconds timeout = kDefaultTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until `key` exists or timeout() passes.
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Adds `delta` to the counter at `key` (a missing key counts as 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual std::vector<uint8_t> compare_set(const std::string& key, const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) = 0;
  // Blocks until every key exists or `timeout` passes.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // True when every key exists right now.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // True when the key existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  virtual void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  virtual std::chrono::milliseconds timeout() const { return timeout_; }

  // Conveniences over the byte API (derived classes re-export them with `using Store::set;` etc.).
  void set(const std::string& key, const std::string& value) { set(key, to_bytes(value)); }
  std::string get_string(const std::string& key) { return to_string(get(key)); }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
    return to_string(compare_set(key, to_bytes(expected), to_bytes(desired)));
  }
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  static std::vector<uint8_t> to_bytes(std::string_view s) { return {s.begin(), s.end()}; }
  static std::string to_string(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

 private:
  std::atomic<std::chrono::milliseconds> timeout_;
};

namespace detail {

// Keys under this prefix are the stores' own bookkeeping (worker and user counts); num_keys() leaves
// them out so users see only their keys.
inline constexpr std::string_view kReservedKeyPrefix = "__lockstep/";
inline bool is_reserved_key(std::string_view key) { return key.starts_with(kReservedKeyPrefix); }

// Parses a counter written by add(); false when the bytes are not a decimal int64.
inline bool parse_counter(const std::vector<uint8_t>& value, int64_t* out) {
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  auto [ptr, ec] = std::from_chars(begin, end, *out);
  return ec == std::errc() && ptr == end && begin != end;
}

using ::lockstep::format_seconds;

// A key as error messages print it: quoted, non-printable bytes escaped, long keys shortened.
inline std::string quote(std::string_view key) {
  static constexpr size_t kMax = 80;
  std::string out = "\"";
  for (size_t i = 0; i < key.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
  }
  if (key.size() > kMax) out += "...";
  return out + "\"";
}

inline std::string quote_all(const std::vector<std::string>& keys) {
  std::string out = "[";
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + quote(keys[i]);
  return out + "]";
}

}  // namespace detail
}  // namespace lockstep::dist
