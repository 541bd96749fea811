// lstm_bench: forward + backward of a 2-layer LSTM (input 128, hidden 128, T 35, batch 20: the
// word-language-model shape) on the CPU, one intra-op thread by default; bench/torch_lstm.py times the
// same step in PyTorch.
//   lstm_bench [--threads N] [--steps S] [--rounds R]
// Last line: "BENCH lstm2x128_fwd_bwd <median ms per step> ms" (and the forward alone before it).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "nn/api.h"
#include "tensor/parallel.h"

using namespace lockstep;

namespace {

// The median over rounds of ms per call of fn (steps calls per round, after 3 warm-up calls).
double ms_per_call(int steps, int rounds, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lockstep 2-layer LSTM forward + backward"};
  int threads = 1, steps = 10, rounds = 7;
  app.add_option("--threads", threads, "intra-op CPU threads");
  app.add_option("--steps", steps, "steps per timed round");
  app.add_option("--rounds", rounds, "timed rounds; the median is reported");
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  manual_seed(0);
  const int64_t T = 35, B = 20, in = 128, hidden = 128;
  nn::LSTM lstm(nn::LSTMOptions(in, hidden).num_layers(2));
  Tensor x = randn({T, B, in});
  double fwd;
  {
    NoGradGuard no_grad;
    fwd = ms_per_call(steps, rounds, [&] { lstm(x); });
  }
  double step = ms_per_call(steps, rounds, [&] {
    lstm->zero_grad();
    auto [out, state] = lstm(x);
    sum(out).backward();
  });
  std::printf("lockstep threads=%d lstm layers=2 in=%ld hidden=%ld T=%ld B=%ld\n", get_num_threads(), long(in),
              long(hidden), long(T), long(B));
  std::printf("BENCH lstm2x128_fwd %10.3f ms\n", fwd);
  std::printf("BENCH lstm2x128_fwd_bwd %10.3f ms\n", step);
  return 0;
}
