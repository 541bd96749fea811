// ddp_bench: DistributedDataParallel training throughput at the world size it is launched with, and where
// each step's time goes.
//
//   bazel-bin/bench/ddp_bench                                         # world 1 (no launcher needed)
//   launch --nproc_per_node=2 bazel-bin/bench/ddp_bench [--workload fmnist]
//
// Workloads, global batch 128 split evenly over the ranks, SGD(lr 0.01, momentum 0.9), CrossEntropyLoss:
//   mlp     MLP 256-512-512-10 (ReLU): ../shared/anchors/torch_mlp.py's workload
//   fmnist  MLP 784-256-128-10 (ReLU): the Fashion-MNIST model of examples/train_eval.cpp (random data)
// As torch_mlp.py, world 1 trains the bare model and larger worlds wrap it in DDP: gloo on the CPU, or
// with --backend nccl one GPU per rank (cuda:LOCAL_RANK), where every phase boundary also waits for the
// device, so that each phase's time includes its GPU work.
//
// step_ms is the median over rounds of (wall time of `steps` steps between two barriers) / steps.
// The breakdown is the mean per step over every timed step and every rank (with the mean step time;
// `other` is what the phases leave of it: timers, the barriers between rounds):
//   forward    DDP forward + loss
//   backward   loss.backward(), the gradient hooks (bucket copies, all-reduce launches) included, the
//              end-of-backward wait excluded
//   comm wait  the end-of-backward wait for all-reduces backward did not hide (Reducer::last_wait_seconds)
//   optimizer  zero_grad + step
// Scaling efficiency = T1 / (world * Tworld) with T1 the world-1 step time at the same global batch: by
// default rank 0 measures it before joining the group (the other ranks wait in the rendezvous), or pass
// it with --baseline-ms. Last line: `step_ms <value>`.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "distributed/api.h"
#include "distributed/ddp.h"
#include "distributed/launch_env.h"
#include "nn/api.h"
#include "optim/api.h"
#include "tensor/cuda/cuda.h"
#include "tensor/ops.h"

using namespace lockstep;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Workload {
  std::string name;
  int64_t in, hidden1, hidden2, out;
};

std::shared_ptr<nn::Module> make_model(const Workload& w) {
  return nn::Sequential(nn::Linear(w.in, w.hidden1), nn::ReLU(),
                                          nn::Linear(w.hidden1, w.hidden2),
                                          nn::ReLU(), nn::Linear(w.hidden2, w.out));
}

// Seconds per step: the phases, and the whole step (the mean over every timed step, barriers included).
struct Phases {
  double forward = 0, backward = 0, wait = 0, optimizer = 0, step = 0;
};

// Trains `net` on one fixed batch; calls `sync` (a barrier, or nothing) around each timed round. Returns
// the per-round step times in ms and adds every timed step's phases to `phases`.
std::vector<double> run(const std::shared_ptr<nn::Module>& net, dist::DistributedDataParallel* ddp, const Workload& w,
                        Device device, int64_t batch, int warmup, int rounds, int steps,
                        const std::function<void()>& sync, Phases& phases) {
  optim::SGD sgd(net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  nn::CrossEntropyLoss loss_fn;
  Tensor x = randn({batch, w.in}, {kFloat32, device});  // x: [batch, in]
  Tensor y = randint(0, w.out, {batch}, {kInt64, device});
  Backend& backend = backend_for(device);
  auto now = [&] {  // on a GPU, once the work queued so far has finished
    if (device.is_cuda()) backend.synchronize(device);
    return Clock::now();
  };
  Phases acc;
  auto step = [&] {
    auto t0 = now();
    sgd.zero_grad();
    auto t1 = now();
    Tensor loss = loss_fn((*net)(x), y);
    auto t2 = now();
    loss.backward();
    auto t3 = now();
    sgd.step();
    auto t4 = now();
    using S = std::chrono::duration<double>;
    const double wait = ddp ? ddp->reducer().last_wait_seconds() : 0;
    acc.optimizer += S(t1 - t0).count() + S(t4 - t3).count();
    acc.forward += S(t2 - t1).count();
    acc.backward += S(t3 - t2).count() - wait;
    acc.wait += wait;
  };
  for (int i = 0; i < warmup; ++i) step();
  acc = {};
  std::vector<double> ms;
  double total = 0;
  for (int r = 0; r < rounds; ++r) {
    sync();
    auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    if (device.is_cuda()) backend.synchronize(device);
    sync();
    total += seconds_since(t0);
    ms.push_back(seconds_since(t0) * 1e3 / steps);
  }
  const double n = double(rounds) * steps;
  phases = {acc.forward / n, acc.backward / n, acc.wait / n, acc.optimizer / n, total / n};
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lockstep DDP training-throughput benchmark"};
  std::string workload = "mlp", backend = "gloo";
  int64_t global_batch = 128;
  int steps = 100, warmup = 20, rounds = 5;
  double baseline_ms = 0;
  bool no_baseline = false;
  dist::DDPOptions ddp_options;  // PyTorch's defaults unless changed below
  app.add_option("--workload", workload, "mlp (256-512-512-10) or fmnist (784-256-128-10)");
  app.add_option("--batch", global_batch, "global batch, split over the ranks");
  app.add_option("--steps", steps, "timed steps per round");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--rounds", rounds, "timed rounds; the median is reported");
  app.add_option("--backend", backend, "gloo (CPU), nccl (one GPU per rank) or auto (nccl when a GPU is visible)");
  app.add_option("--baseline-ms", baseline_ms, "world-1 step time for the scaling efficiency (default: measure it)");
  app.add_flag("--no-baseline", no_baseline, "skip the world-1 measurement and the efficiency");
  app.add_option("--bucket-cap-mb", ddp_options.bucket_cap_mb, "DDP bucket_cap_mb (PyTorch's default 25)");
  app.add_option("--first-bucket-cap-mb", ddp_options.first_bucket_cap_mb, "DDP's first bucket (PyTorch's default 1)");
  app.add_flag("--gradient-as-bucket-view", ddp_options.gradient_as_bucket_view, "DDP gradient_as_bucket_view");
  CLI11_PARSE(app, argc, argv);

  try {
    Workload w;
    if (workload == "mlp") w = {"mlp", 256, 512, 512, 10};
    else if (workload == "fmnist") w = {"fmnist", 784, 256, 128, 10};
    else fail("ddp_bench: unknown --workload '", workload, "' (mlp or fmnist)");

    // The launcher's variables, or srun's or mpirun's (distributed/launch_env.h).
    const dist::LaunchEnv env = dist::discover_launch_env();
    const bool launched = env.world_size > 0;
    const int env_world = launched ? env.world_size : 1;
    const int env_rank = env.rank >= 0 ? env.rank : 0;
    LOCKSTEP_CHECK(env_world >= 1 && global_batch % env_world == 0, "ddp_bench: the global batch ", global_batch,
                   " must split evenly over ", env_world, " rank(s)");

    const bool on_gpu = backend == "nccl" || (backend == "auto" && cuda::is_available());
    const int local_rank = env.local_rank >= 0 ? env.local_rank : env_rank;
    const Device device = on_gpu ? Device::cuda(local_rank) : Device::cpu();
    if (on_gpu) cuda::set_device(local_rank);
    auto model_on_device = [&] {
      manual_seed(0);
      auto m = make_model(w);
      m->to(device);
      return m;
    };

    // World-1 reference, before the group exists, on rank 0 only: the other ranks sleep in the rendezvous.
    auto nothing = [] {};
    Phases phases;
    if (env_world > 1 && baseline_ms <= 0 && !no_baseline && env_rank == 0) {
      baseline_ms =
          median(run(model_on_device(), nullptr, w, device, global_batch, warmup, rounds, steps, nothing, phases));
    }

    int world = 1, rank = 0;
    if (launched) {
      dist::InitOptions init;
      init.backend = backend;
      dist::init_process_group(init);
      world = dist::get_world_size();
      rank = dist::get_rank();
    }
    const int64_t batch = global_batch / world;
    auto model = model_on_device();
    std::shared_ptr<nn::Module> net = model;
    std::shared_ptr<dist::DistributedDataParallel> ddp;
    if (on_gpu) ddp_options.device_ids = {local_rank};
    if (world > 1) net = ddp = std::make_shared<dist::DistributedDataParallel>(model, ddp_options);
    manual_seed(1 + rank);  // each rank its own batch
    auto barrier = [&] {
      if (launched) dist::barrier();
    };
    std::vector<double> ms = run(net, ddp.get(), w, device, batch, warmup, rounds, steps, barrier, phases);
    double step_ms = median(ms);
    if (launched && world > 1) {  // the mean over ranks of each phase; rank 0's step time everywhere
      std::vector<double> mine{phases.forward, phases.backward, phases.wait, phases.optimizer, phases.step};
      Tensor p = to(tensor(mine), device);
      dist::all_reduce(p, dist::ReduceOp::AVG);
      auto v = to(p, Device::cpu()).to_vector<double>();
      phases = {v[0], v[1], v[2], v[3], v[4]};
      Tensor t = to(tensor(std::vector<double>{step_ms}), device);
      dist::broadcast(t, 0);
      step_ms = t.item<double>();
    }
    if (world == 1 && baseline_ms <= 0) baseline_ms = step_ms;

    if (rank == 0) {
      std::vector<double> sorted = ms;
      std::sort(sorted.begin(), sorted.end());
      std::printf("lockstep ddp_bench: %s %ld-%ld-%ld-%ld, world %d, global batch %ld (%ld per rank), %s, %s\n",
                  w.name.c_str(), long(w.in), long(w.hidden1), long(w.hidden2), long(w.out), world, long(global_batch),
                  long(batch), device.is_cuda() ? "one GPU per rank" : "cpu",
                  world > 1 ? ("DDP over " + dist::get_backend() + " (" + dist::default_pg()->transport() + ")").c_str() : "no DDP");
      std::printf("step %.3f ms (median of %d rounds x %d steps; min %.3f, max %.3f), %.0f samples/s\n", step_ms,
                  rounds, steps, sorted.front(), sorted.back(), global_batch / step_ms * 1e3);
      if (baseline_ms > 0)
        std::printf("world-1 step %.3f ms: speedup %.2fx, scaling efficiency %.0f%%\n", baseline_ms,
                    baseline_ms / step_ms, 100 * baseline_ms / (world * step_ms));
      const double other = 1e3 * (phases.step - phases.forward - phases.backward - phases.wait - phases.optimizer);
      std::printf("mean step %.3f ms: forward %.3f ms, backward %.3f ms (hooks included), comm wait %.3f ms "
                  "(not hidden), optimizer %.3f ms, other %.3f ms\n",
                  phases.step * 1e3, phases.forward * 1e3, phases.backward * 1e3, phases.wait * 1e3,
                  phases.optimizer * 1e3, other);
      std::printf("step_ms %.3f\n", step_ms);
    }
    if (launched) dist::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_bench: %s\n", e.what());
    return 1;
  }
}
