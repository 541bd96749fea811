// The CPU's 16-bit kernels that once took float32 copies, against that copy path on the same values:
// batch_norm forward and backward, index_add_ (an embedding gradient), nll_loss forward and backward,
// avg_pool2d. Each "copy" row converts the bfloat16 operands to float32, runs the float32 op and
// converts the result back, which is what the ops layer did before; rounds alternate between the two
// (median of --rounds). Prints "BENCH <name> <ms> ms" lines.
//   tools/bazel run //bench:half_ops_bench -- --rounds 7
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "bench/ms_per_call.h"
#include "nn/functional.h"
#include "tensor/api.h"
#include "tensor/batch_norm.h"
#include "tensor/parallel.h"

using namespace lockstep;
namespace in = lockstep::internal;

namespace {

Tensor f32(const Tensor& t) { return in::to_dtype(t, kFloat32); }
Tensor bf16(const Tensor& t) { return in::to_dtype(t, kBFloat16); }

// Batch norm's four kernels, forward and backward, on x (any floating dtype; weight float32).
void batch_norm_step(const Tensor& x, const Tensor& gy, const Tensor& w, const Tensor& b, bool copy) {
  Tensor xs = copy ? f32(x) : x, gs = copy ? f32(gy) : gy;
  const double count = double(x.numel() / x.size(1));
  auto m = in::batch_norm_moments(in::batch_norm_stats(xs), count, 1e-5);
  Tensor y = in::batch_norm_elemt(xs, m.mean, m.invstd, w, b);
  Tensor sums = in::batch_norm_backward_reduce(gs, xs, m.mean);
  Tensor gx = in::batch_norm_backward_elemt(gs, xs, m.mean, m.invstd, w, sums, count);
  if (copy) y = bf16(y), gx = bf16(gx);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bfloat16 kernels against float32 copies"};
  bench::TimingFlags t;
  t.steps = 5;
  app.add_option("--steps", t.steps, "calls per timed round");
  app.add_option("--rounds", t.rounds, "alternating rounds; the median is reported");
  CLI11_PARSE(app, argc, argv);
  set_num_threads(1);
  manual_seed(0);

  // batch_norm: a ResNet stage's activations [32, 64, 28, 28].
  Tensor x = bf16(randn({32, 64, 28, 28})), gy = bf16(randn({32, 64, 28, 28}));
  Tensor w = ones({64}), b = zeros({64});
  // index_add_: an embedding's gradient, 4096 token rows of 384 into an 8192 x 384 table.
  Tensor rows = bf16(randn({4096, 384})), idx = in::to_dtype(in::mul(rand({4096}), 8191.0), kInt64);
  // nll_loss: log-probabilities [2048, 8192] (a language model's logits), forward and backward.
  Tensor lp = bf16(randn({2048, 8192})), target = in::to_dtype(in::mul(rand({2048}), 8191.0), kInt64);
  Tensor one = bf16(ones({}));
  // avg_pool2d: 3x3, stride 1, padding 1 over [32, 64, 28, 28].
  const std::vector<std::pair<std::string, std::function<void(bool)>>> cases = {
      {"batch_norm_fwd_bwd", [&](bool copy) { batch_norm_step(x, gy, w, b, copy); }},
      {"index_add", [&](bool copy) {
         Tensor table = bf16(zeros({8192, 384}));
         if (copy) {
           Tensor tf = f32(table);
           in::index_add_(tf, 0, idx, f32(rows));
           in::copy_(table, tf);
         } else {
           in::index_add_(table, 0, idx, rows);
         }
       }},
      {"nll_loss_fwd_bwd", [&](bool copy) {
         Tensor l = copy ? f32(lp) : lp;
         Tensor loss = in::nll_loss(l, target, true);
         Tensor g = in::nll_loss_backward(copy ? f32(one) : one, l, target, true);
         if (copy) loss = bf16(loss), g = bf16(g);
       }},
      {"avg_pool2d", [&](bool copy) {
         Tensor y = nn::functional::avg_pool2d(copy ? f32(x) : x, {3, 3}, {1, 1}, {1, 1});
         if (copy) y = bf16(y);
       }},
  };
  for (const auto& [name, fn] : cases) {
    std::vector<double> native, copied;
    bench::TimingFlags one_round = t;
    one_round.rounds = 1;
    for (int r = 0; r < t.rounds; ++r) {  // alternate: the machine's load hits both alike
      native.push_back(bench::ms_per_call(one_round, [&] { fn(false); }));
      copied.push_back(bench::ms_per_call(one_round, [&] { fn(true); }));
    }
    std::sort(native.begin(), native.end());
    std::sort(copied.begin(), copied.end());
    const double n = native[native.size() / 2], c = copied[copied.size() / 2];
    std::printf("BENCH %s_bf16 %.3f ms\nBENCH %s_bf16_via_float32_copy %.3f ms\nBENCH %s_speedup %.2f x\n",
                name.c_str(), n, name.c_str(), c, name.c_str(), c / n);
  }
  return 0;
}
