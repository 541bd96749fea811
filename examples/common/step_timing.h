// Timing helpers of the examples' step reports: wall time, this process's CPU time (every thread;
// steadier than wall time on a loaded machine) and the median step after warm-up.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace lockstep::examples {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline double cpu_seconds() {
  timespec ts;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The median of `v` without its first 3 entries (allocations, caches), keeping at least one; 0 if empty.
inline double median_after_warmup(std::vector<double> v) {
  if (v.empty()) return 0;
  v.erase(v.begin(), v.begin() + std::min<size_t>(v.size() - 1, 3));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace lockstep::examples
