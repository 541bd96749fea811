// Helpers shared by the test suites.
#pragma once

#include <string>
#include <utility>

#include "tensor/check.h"

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

}  // namespace lockstep::testing
