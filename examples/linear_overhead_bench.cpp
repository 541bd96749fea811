// linear_overhead_bench: the host's cost per call of a tiny layer, Linear(5, 2) on a batch of 8, where the
// device's work is negligible and what is timed is lockstep's own path (dispatch, allocation, autograd
// bookkeeping, kernel launch). tools/torch_linear_overhead.py times the same calls in PyTorch.
//   linear_overhead_bench [--device cuda] [--calls N] [--rounds R]
// Prints "BENCH linear5x2_<what>_<device> <median µs per call> us" (gpu_check.sh gathers these).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "nn/api.h"
#include "tensor/cuda/cuda.h"

using namespace lockstep;

namespace {

// Median over rounds of µs per call; the device is synchronised only at the ends of a round, so the
// calls queue up as they would in a training loop.
double us_per_call(const Device& dev, int calls, int rounds, const std::function<void()>& fn) {
  Backend& be = backend_for(dev);
  for (int i = 0; i < 20; ++i) fn();
  be.synchronize(dev);
  std::vector<double> us;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    be.synchronize(dev);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lockstep host overhead per call of Linear(5, 2)"};
  std::string device = "cpu";
  int calls = 2000, rounds = 7;
  app.add_option("--device", device, "cpu, cuda or cuda:N");
  app.add_option("--calls", calls, "calls per timed round");
  app.add_option("--rounds", rounds, "timed rounds; the median is reported");
  CLI11_PARSE(app, argc, argv);
  try {
    const Device dev = Device::parse(device);
    if (dev.is_cuda() && cuda::device_count() == 0) {
      std::printf("SKIPPED: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
      return 0;
    }
    manual_seed(0);
    auto layer = nn::Linear(5, 2);
    layer->to(dev);
    Tensor x = randn({8, 5}, {kFloat32, dev});
    const std::string tag = dev.is_cuda() ? "cuda" : "cpu";
    auto report = [&](const char* what, double us) {
      std::printf("BENCH linear5x2_%s_%s %10.2f us\n", what, tag.c_str(), us);
      std::fflush(stdout);
    };
    {
      NoGradGuard no_grad;
      report("forward_nograd", us_per_call(dev, calls, rounds, [&] { layer(x); }));
    }
    report("forward", us_per_call(dev, calls, rounds, [&] { layer(x); }));
    // One training step's worth: forward, sum, backward into the two parameters' gradients.
    report("fwd_bwd", us_per_call(dev, calls, rounds, [&] {
             layer->zero_grad();
             layer(x).sum().backward();
           }));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linear_overhead_bench: %s\n", e.what());
    return 1;
  }
}
