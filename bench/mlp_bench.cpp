// mlp_bench: times one training step of an MLP (default 256-512-512-10 with ReLU, CrossEntropyLoss,
// SGD(lr 0.01, momentum 0.9), batch 128), the workload of ../shared/anchors/torch_mlp.py.
// --threads sets the intra-op thread count. Last line: `step_ms <value>` (the median over timed rounds).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "nn/api.h"
#include "optim/api.h"
#include "tensor/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"lockstep MLP training-step benchmark"};
  int64_t in = 256, hidden = 512, out = 10, batch = 128;
  int steps = 300, warmup = 10, rounds = 5;
  std::string device = "cpu";
  int threads = 1;
  app.add_option("--in", in, "input features");
  app.add_option("--hidden", hidden, "hidden width (two hidden layers)");
  app.add_option("--out", out, "classes");
  app.add_option("--batch", batch, "batch size");
  app.add_option("--steps", steps, "timed steps per round");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--rounds", rounds, "timed rounds; the median is reported");
  app.add_option("--device", device, "cpu, cuda or cuda:N");
  auto* threads_opt =
      app.add_option("--threads", threads, "intra-op CPU threads (default: OMP_NUM_THREADS, else the cores available)");
  CLI11_PARSE(app, argc, argv);

  try {
    Device dev = Device::parse(device);
    if (*threads_opt) set_num_threads(threads);
    manual_seed(0);
    auto model = nn::Sequential(nn::Linear(in, hidden), nn::ReLU(),
                                                  nn::Linear(hidden, hidden),
                                                  nn::ReLU(), nn::Linear(hidden, out));
    model->to(dev);
    optim::SGD sgd(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
    nn::CrossEntropyLoss loss_fn;
    Tensor x = randn({batch, in}, {kFloat32, dev});
    Tensor y = randint(0, out, {batch}, {kInt64, dev});
    auto step = [&] {
      sgd.zero_grad();
      loss_fn(model(x), y).backward();
      sgd.step();
    };
    Backend& be = backend_for(dev);
    for (int i = 0; i < warmup; ++i) step();
    be.synchronize(dev);
    std::vector<double> ms;
    for (int r = 0; r < rounds; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) step();
      be.synchronize(dev);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps);
    }
    std::sort(ms.begin(), ms.end());
    double med = ms[ms.size() / 2];
    std::printf(
        "lockstep device=%s threads=%d mlp %ld-%ld-%ld-%ld batch=%ld steps=%dx%d min_ms=%.3f samples_per_s=%.0f\n",
        dev.str().c_str(), get_num_threads(), long(in), long(hidden), long(hidden), long(out), long(batch), rounds,
        steps, ms[0], batch / med * 1e3);
    // For tools/gpu/gpu_check.sh's table, then the line other scripts read.
    std::printf("BENCH mlp_step_%s_%ld-%ld-%ld_b%ld %.3f ms\n", dev.is_cuda() ? "cuda" : "cpu", long(in), long(hidden),
                long(out), long(batch), med);
    std::printf("step_ms %.3f\n", med);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
