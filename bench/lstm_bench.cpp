// lstm_bench: forward + backward of a 2-layer LSTM or GRU on the CPU, one intra-op thread by default,
// in float32 or under autocast(kCPU, kBFloat16) (--autocast); bench/torch_lstm.py times the same step in
// PyTorch. The default shape is the word-language-model's (input 128, hidden 128, T 35, batch 20).
//   lstm_bench [--mode lstm|gru] [--input I] [--hidden H] [--seq T] [--batch B] [--autocast]
//              [--threads N] [--steps S] [--rounds R]
// Last line: "BENCH lstm2x<H>_fwd_bwd <median ms per step> ms" (gru2x<H>_... for GRU, _bf16 appended
// under autocast; the forward alone before it).
#include <cstdio>
#include <optional>
#include <string>

#include "bench/ms_per_call.h"
#include "nn/api.h"
#include "tensor/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"lockstep 2-layer LSTM or GRU forward + backward"};
  bench::TimingFlags timing;
  std::string mode = "lstm";
  int64_t T = 35, B = 20, in = 128, hidden = 128;
  bool use_autocast = false;
  app.add_option("--mode", mode, "lstm or gru")->check(CLI::IsMember({"lstm", "gru"}));
  app.add_option("--input", in, "input size");
  app.add_option("--hidden", hidden, "hidden size");
  app.add_option("--seq", T, "time steps");
  app.add_option("--batch", B, "batch size");
  app.add_flag("--autocast", use_autocast, "forward under autocast(kCPU, kBFloat16), as torch.autocast(\"cpu\")");
  timing.add_to(app);
  CLI11_PARSE(app, argc, argv);
  set_num_threads(timing.threads);
  manual_seed(0);
  nn::LSTM lstm(nn::LSTMOptions(in, hidden).num_layers(2));
  nn::GRU gru(nn::GRUOptions(in, hidden).num_layers(2));
  nn::Module& module = mode == "lstm" ? static_cast<nn::Module&>(*lstm) : *gru;
  Tensor x = randn({T, B, in});
  auto output = [&] {
    std::optional<autocast> guard;
    if (use_autocast) guard.emplace(kCPU, kBFloat16);
    return mode == "lstm" ? std::get<0>(lstm(x)) : std::get<0>(gru(x));
  };
  double fwd;
  {
    NoGradGuard no_grad;
    fwd = bench::ms_per_call(timing, [&] { output(); });
  }
  double step = bench::ms_per_call(timing, [&] {
    module.zero_grad();
    sum(output().to(kFloat32)).backward();
  });
  const std::string label = mode + "2x" + std::to_string(hidden), sfx = use_autocast ? "_bf16" : "";
  std::printf("lockstep threads=%d %s layers=2 in=%ld hidden=%ld T=%ld B=%ld autocast=%d\n", get_num_threads(),
              mode.c_str(), long(in), long(hidden), long(T), long(B), int(use_autocast));
  std::printf("BENCH %s_fwd%s %10.3f ms\n", label.c_str(), sfx.c_str(), fwd);
  std::printf("BENCH %s_fwd_bwd%s %10.3f ms\n", label.c_str(), sfx.c_str(), step);
  return 0;
}
