// Environment variables, read in one checked way: a value that is set but malformed is an error
// naming the variable, never a silent default (atoi("two") == 0 would be a 0-second timeout).
#pragma once

#include <charconv>
#include <climits>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "common/check.h"

namespace lockstep {

// Reads one variable: the process's environment (process_env), or a recorded one in a test. Returns
// null when the variable is unset.
using GetEnv = std::function<const char*(const char*)>;
inline const char* process_env(const char* name) { return std::getenv(name); }

// The variable's value, or nullopt when it is unset or empty.
inline std::optional<std::string> env_string(const char* name) {
  const char* v = process_env(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

// The variable as an integer in [lo, hi], `fallback` when unset or empty.
inline long long env_int(const char* name, long long fallback, long long lo = LLONG_MIN, long long hi = LLONG_MAX) {
  auto s = env_string(name);
  if (!s) return fallback;
  long long value = 0;
  auto [ptr, ec] = std::from_chars(s->data(), s->data() + s->size(), value);
  LOCKSTEP_CHECK(ec == std::errc() && ptr == s->data() + s->size(), "environment variable ", name, "=\"", *s,
                 "\" is not an integer");
  LOCKSTEP_CHECK(value >= lo && value <= hi, "environment variable ", name, "=", value, " is out of range [", lo,
                 ", ", hi, "]");
  return value;
}

// A flag: unset, empty or "0" is false; anything else true.
inline bool env_flag(const char* name) {
  auto s = env_string(name);
  return s && *s != "0";
}

}  // namespace lockstep
