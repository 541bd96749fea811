// The timing loop of the layer benchmarks (lstm_bench, transformer_bench): the median over rounds of
// the milliseconds per call, and the flags that set it, as bench/ms_per_call.py does for PyTorch's side.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace lockstep::bench {

struct TimingFlags {
  int threads = 1, steps = 10, rounds = 7;
  void add_to(CLI::App& app) {
    app.add_option("--threads", threads, "intra-op CPU threads");
    app.add_option("--steps", steps, "calls per timed round");
    app.add_option("--rounds", rounds, "timed rounds; the median is reported");
  }
};

// The median over rounds of ms per call of fn (steps calls per round, after 3 warm-up calls).
inline double ms_per_call(const TimingFlags& t, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int r = 0; r < t.rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < t.steps; ++i) fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / t.steps);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace lockstep::bench
