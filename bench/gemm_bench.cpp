// gemm_bench: times cpu::gemm on the products of one training step at a given thread count, and
// prints each product's median: --shapes mlp (256-512-512-10, batch 128: three forward, five
// backward), gpt (examples/gpt's default model: its linear layers and attention), gpt384 (the linear
// layers of a 6-layer, 384-wide GPT at block 256, batch 8: 2048 tokens; forward, input and weight
// gradients, and the 65-token head) or cnn (examples/cnn_fashion's convolutions as im2col products)
// or rnn (bench/lstm_bench's LSTM layer). --dtype bfloat16 runs the bfloat16 GEMM (bfloat16 A, B and
// C, float32 accumulation: torch.matmul on bfloat16 tensors); compare with torch_gemm.py.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <random>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/cpu/isa.h"
#include "tensor/dtype.h"
#include "tensor/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"cpu::gemm on an MLP step's shapes"};
  int threads = get_num_threads(), reps = 200, rounds = 7;
  std::string which = "mlp", dtype = "float32";
  app.add_option("--shapes", which, "mlp, gpt, gpt384, cnn or rnn")
      ->check(CLI::IsMember({"mlp", "gpt", "gpt384", "cnn", "rnn"}));
  app.add_option("--dtype", dtype, "float32 or bfloat16")->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--threads", threads, "intra-op threads");
  app.add_option("--reps", reps, "products per timed round");
  app.add_option("--rounds", rounds, "timed rounds; the median is reported");
  // The calling thread's CPU time instead of wall time: on a shared machine, time other processes
  // held the core is left out (one thread only: the pool's threads are not counted).
  bool cpu_time = false;
  app.add_flag("--cpu-time", cpu_time, "time with the calling thread's CPU clock (with --threads 1)");
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
  // 2048 tokens of width 384: c_attn (384 -> 1152), the attention's projection (384 -> 384), the MLP's
  // c_fc (384 -> 1536) and c_proj (1536 -> 384), each forward, input and weight gradient; lm_head (65).
  if (which == "gpt384")
    shapes = {{false, true, 2048, 1152, 384}, {false, false, 2048, 384, 1152}, {true, false, 1152, 384, 2048},
              {false, true, 2048, 384, 384},  {false, false, 2048, 384, 384},  {true, false, 384, 384, 2048},
              {false, true, 2048, 1536, 384}, {false, false, 2048, 384, 1536}, {true, false, 1536, 384, 2048},
              {false, true, 2048, 384, 1536}, {false, false, 2048, 1536, 384}, {true, false, 384, 1536, 2048},
              {false, true, 2048, 65, 384}};
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
  if (which != "mlp" && which != "rnn" && app.count("--reps") == 0) reps = which == "gpt384" ? 5 : 20;
  int64_t need = 0;
  for (const Shape& s : shapes) need = std::max({need, s.m * s.k, s.k * s.n, s.m * s.n});
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(need), b(need), c(need);
  for (auto* v : {&a, &b}) for (float& x : *v) x = u(rng);
  const bool bf16 = dtype == "bfloat16";
  std::vector<BFloat16> a16(a.begin(), a.end()), b16(b.begin(), b.end()), c16(bf16 ? need : 0);
  std::printf("threads=%d isa=%s dtype=%s%s\n", get_num_threads(), cpu::isa_name(), dtype.c_str(),
              bf16 ? (cpu::use_avx512_bf16() ? " (avx512_bf16)" : " (float32 fallback)") : "");
  double total = 0;
  for (const Shape& s : shapes) {
    int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    auto once = [&] {
      if (bf16) cpu::gemm(s.ta, s.tb, s.m, s.n, s.k, 1.f, a16.data(), lda, b16.data(), ldb, 0.f, c16.data(), s.n);
      else cpu::gemm(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), s.n);
    };
    for (int i = 0; i < 20; ++i) once();
    std::vector<double> us;
    for (int r = 0; r < rounds; ++r) {
      auto now = [&] {
        if (!cpu_time) return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
        timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
      };
      const double t0 = now();
      for (int i = 0; i < reps; ++i) once();
      us.push_back((now() - t0) / reps);
    }
    std::sort(us.begin(), us.end());
    total += us[us.size() / 2];
    std::printf("%s%s m=%4ld n=%4ld k=%4ld  median_us %8.1f  best_us %8.1f  GFLOP/s %6.1f\n", s.ta ? "T" : "N",
                s.tb ? "T" : "N", long(s.m), long(s.n), long(s.k), us[us.size() / 2], us[0],
                2e-3 * s.m * s.n * s.k / us[us.size() / 2]);
  }
  std::printf("total_us %.1f\n", total);
}
