// Helpers shared by the test suites.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <typeinfo>
#include <utility>

#include <doctest/doctest.h>

#include "common/check.h"

// In a rank's code (tests/util/multiprocess.h): throws lockstep::Error with file:line and the message when
// `cond` is false (doctest's CHECK cannot report from a child process).
#define RANK_CHECK(cond, ...)                                                                             \
  do {                                                                                                    \
    if (!(cond)) ::lockstep::fail(__FILE__, ":", __LINE__, ": RANK_CHECK(" #cond ") failed" __VA_OPT__(, ": ", ) __VA_ARGS__); \
  } while (0)

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

// expect_error: fn() must throw a lockstep::Error naming what the test expects. Two forms, for the two
// places a check can run:
//   - in a rank (a forked child, tests/util/multiprocess.h): fails the rank (RANK_CHECK) unless the
//     message contains `needle`;
//   - in a doctest case: a failed doctest check, and the case goes on, unless f() throws lockstep::Error
//     (not another exception, and not nothing) whose message contains every one of `parts`; `what`
//     names the call in the failure.
inline void expect_error(const std::function<void()>& fn, const std::string& needle) {
  const std::string message = error_of(fn);
  RANK_CHECK(message.find(needle) != std::string::npos, "the error \"", message, "\" does not mention \"", needle,
             "\"");
}

inline void expect_error(const std::string& what, const std::function<void()>& f,
                         std::initializer_list<std::string> parts) {
  std::string message;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK(what, ": threw a ", typeid(e).name(), " instead of lockstep::Error: ", e.what());
    return;
  }
  if (message.empty()) {
    FAIL_CHECK(what, ": no error");
    return;
  }
  for (const std::string& part : parts)
    CHECK_MESSAGE(message.find(part) != std::string::npos, what, ": the message \"", message, "\" does not name ", part);
}

}  // namespace lockstep::testing
