// gemm_bench: times cpu::gemm on the products of one training step at a given thread count, and
// prints each product's median: --shapes mlp (256-512-512-10, batch 128: three forward, five
// backward), gpt (examples/gpt's default model: its linear layers and attention) or cnn
// (examples/cnn_fashion's convolutions as im2col products) or rnn (bench/lstm_bench's LSTM layer).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/isa.h"
#include "tensor/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"cpu::gemm on an MLP step's shapes"};
  int threads = get_num_threads(), reps = 200, rounds = 7;
  std::string which = "mlp";
  app.add_option("--shapes", which, "mlp, gpt, cnn or rnn")->check(CLI::IsMember({"mlp", "gpt", "cnn", "rnn"}));
  app.add_option("--threads", threads, "intra-op threads");
  app.add_option("--reps", reps, "products per timed round");
  app.add_option("--rounds", rounds, "timed rounds; the median is reported");
  CLI11_PARSE(app, argc, argv);
  set_num_threads(threads);
  struct Shape { bool ta, tb; int64_t m, n, k; };
  // ta/tb as autograd's linear issues them: y = x W^T, dx = dy W, dW = dy^T x.
  std::vector<Shape> shapes{{false, true, 128, 512, 256}, {false, true, 128, 512, 512}, {false, true, 128, 10, 512},
                            {true, false, 10, 512, 128},  {false, false, 128, 512, 10}, {true, false, 512, 512, 128},
                            {false, false, 128, 512, 512}, {true, false, 512, 256, 128}};
  // 768 tokens (12 x 64) of width 128: qkv, MLP up and down (forward, input and weight gradients);
  // per head, scores q k^T and att @ v [64, 64] x [64, 32] and a gradient of each.
  if (which == "gpt")
    shapes = {{false, true, 768, 384, 128}, {false, false, 768, 128, 384}, {true, false, 384, 128, 768},
              {false, true, 768, 512, 128}, {false, false, 768, 128, 512}, {true, false, 512, 128, 768},
              {false, true, 64, 64, 32},    {false, false, 64, 32, 64},   {true, false, 64, 32, 64}};
  // Batch 64: conv1 (1 -> 32, 3x3 over 28x28) and conv2 (32 -> 64 over 26x26): forward W @ cols,
  // weight gradient g @ cols^T, input gradient W^T @ g.
  if (which == "cnn")
    shapes = {{false, false, 32, 43264, 9},   {false, true, 32, 9, 43264},   {false, false, 64, 36864, 288},
              {false, true, 64, 288, 36864},  {true, false, 288, 36864, 64}};
  // An LSTM layer of 128 units, batch 20, T 35: a step's h W_hh^T (W_hh transposed once per layer) and
  // its backward dgates W_hh; the input projection of all steps and its weight gradient.
  if (which == "rnn")
    shapes = {{false, false, 20, 512, 128}, {false, false, 20, 128, 512}, {false, true, 700, 512, 128},
              {true, false, 512, 128, 700}};
  if (which != "mlp" && which != "rnn" && app.count("--reps") == 0) reps = 20;
  int64_t need = 0;
  for (const Shape& s : shapes) need = std::max({need, s.m * s.k, s.k * s.n, s.m * s.n});
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(need), b(need), c(need);
  for (auto* v : {&a, &b}) for (float& x : *v) x = u(rng);
  std::printf("threads=%d isa=%s\n", get_num_threads(), cpu::isa_name());
  double total = 0;
  for (const Shape& s : shapes) {
    int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    auto once = [&] { cpu::gemm(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n); };
    for (int i = 0; i < 20; ++i) once();
    std::vector<double> us;
    for (int r = 0; r < rounds; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) once();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps);
    }
    std::sort(us.begin(), us.end());
    total += us[us.size() / 2];
    std::printf("%s%s m=%4ld n=%4ld k=%4ld  median_us %8.1f  best_us %8.1f  GFLOP/s %6.1f\n", s.ta ? "T" : "N",
                s.tb ? "T" : "N", long(s.m), long(s.n), long(s.k), us[us.size() / 2], us[0],
                2e-3 * s.m * s.n * s.k / us[us.size() / 2]);
  }
  std::printf("total_us %.1f\n", total);
}
