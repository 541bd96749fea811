// loader_bench: DataLoader throughput on Fashion-MNIST's training split (60000 images of 784
// float32 pixels), shuffled, batch 64 by default, with num_workers 0 and 2. A batch is one
// index_select per tensor, so this is the cost of a gather of 64 rows plus the loader's bookkeeping.
// Last line: `loader_batches_per_s <value>` with num_workers = 0 (the default loader).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "data/api.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"lockstep DataLoader throughput on Fashion-MNIST"};
  std::string dir = data::kFashionMnistDir;
  int64_t batch = 64;
  int epochs = 3;
  app.add_option("--dir", dir, "directory of the Fashion-MNIST IDX files");
  app.add_option("--batch", batch, "batch size");
  app.add_option("--epochs", epochs, "timed epochs per configuration");
  CLI11_PARSE(app, argc, argv);

  try {
    auto t0 = Clock::now();
    auto train = data::load_fashion_mnist(dir, /*train=*/true);
    double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("loaded %s: inputs %s, %.2f s\n", dir.c_str(), shape_str(train->inputs().shape()).c_str(), load_s);

    double batches_per_s_serial = 0;
    for (int workers : {0, 2}) {
      data::DataLoader loader(train, {.batch_size = batch, .shuffle = true, .num_workers = workers});
      int64_t batches = 0, samples = 0;
      auto start = Clock::now();
      for (int e = 0; e < epochs; ++e) {
        for (auto& b : loader) {
          ++batches;
          samples += b.target.numel();
        }
      }
      double s = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf("loader workers=%d batch=%ld epochs=%d batches=%ld batches_per_s=%.0f samples_per_s=%.0f\n", workers,
                  long(batch), epochs, long(batches), batches / s, samples / s);
      if (workers == 0) batches_per_s_serial = batches / s;
    }
    std::printf("loader_batches_per_s %.0f\n", batches_per_s_serial);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loader_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
