// Deadlines: every blocking call in lockstep (stores, sockets, collectives, launcher waits) takes one,
// so a lost peer becomes an error naming it instead of a hang.
#pragma once

#include <chrono>
#include <string>

#include "common/check.h"

namespace lockstep {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_after(std::chrono::milliseconds timeout) { return Clock::now() + timeout; }

// Time left until `deadline`, never negative.
inline std::chrono::milliseconds time_left(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

// "0.25s", "300s": how timeouts read in error messages.
inline std::string format_seconds(std::chrono::milliseconds d) {
  auto ms = d.count();
  std::string s = std::to_string(ms / 1000);
  if (ms % 1000) {
    std::string frac = std::to_string(1000 + ms % 1000).substr(1);  // zero-padded to 3 digits
    while (frac.back() == '0') frac.pop_back();
    s += "." + frac;
  }
  return s + "s";
}

// What any call that runs out of time throws; catch lockstep::Error to handle all errors.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

}  // namespace lockstep
