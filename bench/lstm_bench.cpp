// lstm_bench: forward + backward of a 2-layer LSTM or GRU (input 128, hidden 128, T 35, batch 20: the
// word-language-model shape) on the CPU, one intra-op thread by default; bench/torch_lstm.py times the
// same step in PyTorch.
//   lstm_bench [--mode lstm|gru] [--threads N] [--steps S] [--rounds R]
// Last line: "BENCH lstm2x128_fwd_bwd <median ms per step> ms" (gru2x128_... for GRU; the forward
// alone before it).
#include <cstdio>
#include <string>

#include "bench/ms_per_call.h"
#include "nn/api.h"
#include "tensor/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"lockstep 2-layer LSTM or GRU forward + backward"};
  bench::TimingFlags timing;
  std::string mode = "lstm";
  app.add_option("--mode", mode, "lstm or gru")->check(CLI::IsMember({"lstm", "gru"}));
  timing.add_to(app);
  CLI11_PARSE(app, argc, argv);
  set_num_threads(timing.threads);
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
    fwd = bench::ms_per_call(timing, [&] { output(); });
  }
  double step = bench::ms_per_call(timing, [&] {
    module.zero_grad();
    sum(output()).backward();
  });
  std::printf("lockstep threads=%d %s layers=2 in=%ld hidden=%ld T=%ld B=%ld\n", get_num_threads(), mode.c_str(),
              long(in), long(hidden), long(T), long(B));
  std::printf("BENCH %s2x128_fwd %10.3f ms\n", mode.c_str(), fwd);
  std::printf("BENCH %s2x128_fwd_bwd %10.3f ms\n", mode.c_str(), step);
  return 0;
}
