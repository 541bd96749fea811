// lstm_bench: forward + backward of a 2-layer LSTM or GRU (input 128, hidden 128, T 35, batch 20: the
// word-language-model shape) on the CPU, one intra-op thread by default; bench/torch_lstm.py times the
// same step in PyTorch.
//   lstm_bench [--mode lstm|gru] [--threads N] [--steps S] [--rounds R]
// Last line: "BENCH lstm2x128_fwd_bwd <median ms per step> ms" (gru2x128_... for GRU; the forward
// alone before it).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
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
  CLI::App app{"lockstep 2-layer LSTM or GRU forward + backward"};
  int threads = 1, steps = 10, rounds = 7;
  std::string mode = "lstm";
  app.add_option("--mode", mode, "lstm or gru")->check(CLI::IsMember({"lstm", "gru"}));
  app.add_option("--threads", threads, "intra-op CPU threads");
  app.add_option("--steps", steps, "steps per timed round");
  app.add_option("--rounds", rounds, "timed rounds; the median is reported");
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  manual_seed(0);
  const int64_t T = 35, B = 20, in = 128, hidden = 128;
  nn::LSTM lstm(nn::LSTMOptions(in, hidden).num_layers(2));
  nn::GRU gru(nn::GRUOptions(in, hidden).num_layers(2));
  nn::Module& module = mode == "lstm" ? static_cast<nn::Module&>(*lstm) : *gru;
  Tensor x = randn({T, B, in});
  auto output = [&] { return mode == "lstm" ? std::get<0>(lstm(x)) : std::get<0>(gru(x)); };
  double fwd;
  {
    NoGradGuard no_grad;
    fwd = ms_per_call(steps, rounds, [&] { output(); });
  }
  double step = ms_per_call(steps, rounds, [&] {
    module.zero_grad();
    sum(output()).backward();
  });
  std::printf("lockstep threads=%d %s layers=2 in=%ld hidden=%ld T=%ld B=%ld\n", get_num_threads(), mode.c_str(),
              long(in), long(hidden), long(T), long(B));
  std::printf("BENCH %s2x128_fwd %10.3f ms\n", mode.c_str(), fwd);
  std::printf("BENCH %s2x128_fwd_bwd %10.3f ms\n", mode.c_str(), step);
  return 0;
}
