// gemm_bench: times cpu::gemm on the products of one MLP training step (256-512-512-10, batch
// 128: three forward, five backward) at a given thread count, and prints each product's median.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tensor/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"cpu::gemm on an MLP step's shapes"};
  int threads = get_num_threads(), reps = 200, rounds = 7;
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
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(512 * 512), b(512 * 512), c(512 * 512);
  for (auto* v : {&a, &b}) for (float& x : *v) x = u(rng);
  std::printf("threads=%d isa=%s\n", get_num_threads(), cpu::gemm_isa());
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
