// Helpers shared by the test suites.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>

#include "common/check.h"

namespace lockstep::testing {

// The message of the lockstep::Error that f() throws; "" when it throws none (so a check on the
// message fails, and CHECK(error_of(...).empty()) asserts that no error was thrown).
template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message of any std::exception f() throws (error_of catches lockstep::Error alone); "" when
// it throws none.
template <typename F>
std::string thrown_by(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Seconds elapsed since `t` on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A fresh directory (under Bazel's per-test TEST_TMPDIR when set, else /tmp) named after `prefix`,
// removed with everything in it on destruction. Multi-process tests create it in the parent: the
// ranks leave with _exit, so only the parent removes it.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "lockstep_test") {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "_XXXXXX";
    LOCKSTEP_CHECK(::mkdtemp(tmpl.data()) != nullptr, "TempDir: mkdtemp(", tmpl, "): ", std::strerror(errno));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace lockstep::testing
