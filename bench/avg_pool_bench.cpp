// CPU avg_pool2d in bfloat16 and float16 (the fused 16-bit kernels, tensor/cpu/avg_pool2d.h) against
// the route 16-bit pooling took before them (convert to float32, pool in float32, convert back) and
// against float32 itself, forward and forward + backward, on a ResNet stage's activations
// [32, 64, 56, 56]: 3x3 stride 2 padding 1 (a stem-like downsampling pool) and 2x2 stride 2. Rounds
// alternate between the variants (median of --rounds). Prints "BENCH <case> <ms> ms" lines, as
// bench/torch_avg_pool.py prints PyTorch's; bench/avg_pool_compare.py runs both and makes the table.
//   bazel-bin/bench/avg_pool_bench --rounds 7 --steps 5
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "bench/ms_per_call.h"
#include "nn/functional.h"
#include "tensor/api.h"
#include "tensor/parallel.h"

using namespace lockstep;
namespace F = lockstep::nn::functional;

namespace {

struct Pool {
  const char* name;
  int64_t k, s, p;
};

// One call: forward, or forward and backward, of the pool on x in `dt`; `via_float32` converts a
// 16-bit x to float32 first and the results back, as the ops layer did before the 16-bit kernels.
void step(const Pool& pool, const Tensor& x, const Tensor& gy, bool backward, bool via_float32) {
  const Dtype dt = x.dtype();
  Tensor xs = via_float32 ? x.to(kFloat32) : x;
  if (!backward) {
    NoGradGuard no_grad;
    Tensor y = F::avg_pool2d(xs, pool.k, pool.s, pool.p);
    if (via_float32) y = y.to(dt);
    return;
  }
  xs = xs.detach().requires_grad_();
  Tensor y = F::avg_pool2d(xs, pool.k, pool.s, pool.p);
  y.backward(via_float32 ? gy.to(kFloat32) : gy);
  if (via_float32) {
    y = y.to(dt);
    Tensor gx = xs.grad().to(dt);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"16-bit avg_pool2d on the CPU against the float32 route"};
  bench::TimingFlags t;  // --threads 1, --steps, --rounds (alternating; the median is reported)
  t.steps = 5;
  t.add_to(app);
  CLI11_PARSE(app, argc, argv);
  set_num_threads(t.threads);
  manual_seed(0);
  const Tensor x32 = randn({32, 64, 56, 56});
  const Pool pools[] = {{"3x3s2p1", 3, 2, 1}, {"2x2s2", 2, 2, 0}};
  for (const Pool& pool : pools)
    for (bool backward : {false, true}) {
      const Shape out_shape = F::avg_pool2d(x32, pool.k, pool.s, pool.p).shape();
      const Tensor gy32 = randn(out_shape);
      struct Variant {
        std::string name;
        Tensor x, gy;
        bool via_float32;
      };
      std::vector<Variant> variants;
      for (Dtype dt : {kBFloat16, kFloat16}) {
        const std::string d = dtype_name(dt);
        variants.push_back({d, x32.to(dt), gy32.to(dt), false});
        variants.push_back({d + "_via_float32", x32.to(dt), gy32.to(dt), true});
      }
      variants.push_back({"float32", x32, gy32, false});
      std::vector<std::vector<double>> ms(variants.size());
      bench::TimingFlags one_round = t;
      one_round.rounds = 1;
      for (int r = 0; r < t.rounds; ++r)  // alternate: the machine's load hits every variant alike
        for (size_t v = 0; v < variants.size(); ++v)
          ms[v].push_back(bench::ms_per_call(one_round, [&] {
            step(pool, variants[v].x, variants[v].gy, backward, variants[v].via_float32);
          }));
      for (size_t v = 0; v < variants.size(); ++v) {
        std::sort(ms[v].begin(), ms[v].end());
        std::printf("BENCH %s_%s_%s %.3f ms\n", pool.name, backward ? "fwd_bwd" : "fwd", variants[v].name.c_str(),
                    ms[v][ms[v].size() / 2]);
      }
    }
  return 0;
}
