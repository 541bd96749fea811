// linear_overhead_bench: the host's cost per call of a tiny layer, Linear(5, 2) on a batch of 8, where the
// device's work is negligible and what is timed is lockstep's own path (dispatch, allocation, autograd
// bookkeeping, kernel launch). bench/torch_linear_overhead.py times the same calls in PyTorch.
//   linear_overhead_bench [--device cuda] [--calls N] [--rounds R]
// Prints "BENCH linear5x2_<what>_<device>[_host] <median µs per call> us" (gpu_check.sh gathers these):
// _host is the time to issue the calls, the other the time until the device has run them.
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

// Medians over rounds of µs per call: `host`, until the last call has returned (what the host spends
// issuing the work), and `total`, until the device has finished it too. The device is synchronised only
// at the ends of a round, so the calls queue up as they would in a training loop.
struct PerCall {
  double host, total;
};

PerCall us_per_call(const Device& dev, int calls, int rounds, const std::function<void()>& fn) {
  Backend& be = backend_for(dev);
  for (int i = 0; i < 20; ++i) fn();
  be.synchronize(dev);
  std::vector<double> host, total;
  using Clock = std::chrono::steady_clock;
  auto us = [&](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count() / calls;
  };
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) fn();
    auto t1 = Clock::now();
    be.synchronize(dev);
    host.push_back(us(t0, t1));
    total.push_back(us(t0, Clock::now()));
  }
  std::sort(host.begin(), host.end());
  std::sort(total.begin(), total.end());
  return {host[host.size() / 2], total[total.size() / 2]};
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
    auto report = [&](const char* what, PerCall t) {
      std::printf("BENCH linear5x2_%s_%s_host %10.2f us\n", what, tag.c_str(), t.host);
      std::printf("BENCH linear5x2_%s_%s %10.2f us\n", what, tag.c_str(), t.total);
      std::fflush(stdout);
    };
    {
      NoGradGuard no_grad;
      report("forward_nograd", us_per_call(dev, calls, rounds, [&] { layer(x); }));
      // Its two device operations alone (linear's forward is exactly these): the bias copied into the
      // output rows, then the GEMM adding x w^T onto them.
      Tensor out = empty({8, 2}, {kFloat32, dev}), bias = layer->bias.expand({8, 2});
      report("bias_copy_nograd", us_per_call(dev, calls, rounds, [&] { out.copy_(bias); }));
      report("gemm_nograd", us_per_call(dev, calls, rounds, [&] {
               internal::gemm_(out, x, false, layer->weight, true, 1.0, 1.0);
             }));
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
