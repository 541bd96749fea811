// train_eval: the second documented loop, on real data. An MLP 784-256-128-10 learns Fashion-MNIST
// with DistributedDataParallel: per epoch set_epoch, training with CrossEntropyLoss and SGD(momentum),
// then evaluation on a DistributedSampler-sharded test set whose correct and total counts are
// all-reduced, so the printed accuracy is the global one. The lr follows CosineAnnealingLR over the
// epochs. Checkpoints (--checkpoint, --resume) hold model, optimizer, scheduler and epoch in one
// safetensors file (optim/checkpoint.h); --init and --save files hold the weights alone.
//
//   launch --nproc_per_node=2 bazel-bin/examples/train_eval --epochs 10
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "data/api.h"
#include "distributed/api.h"
#include "examples/common/train_device.h"
#include "distributed/ddp.h"
#include "nn/api.h"
#include "optim/api.h"
#include "optim/checkpoint.h"
#include "tensor/cuda/cuda.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  int epochs = 10;
  int64_t batch_size = 64;  // per rank, as DataLoader's
  double lr = 0.05, momentum = 0.9;
  bool shuffle = true, cosine = true, stop_on_nan = true;
  std::string backend = "auto", device = "auto", data_dir = data::kFashionMnistDir;
  std::string init, save, resume, checkpoint;
  double timeout_s = 0;
  int workers = 0;
  // Fault injection for tests (tests/examples/train_eval_restart_test.sh, tests/examples/train_eval_faults_test.sh).
  int fail_at_epoch = -1;
  int fault_rank = -1;  // the rank the step faults below hit; -1: every rank
  int64_t inject_nan_at_step = -1, sigkill_at_step = -1;
};

// "nan", "inf", "-inf" or the number, the same on every platform.
std::string loss_text(double l) { return std::isnan(l) ? "nan" : lockstep::detail::str_cat(l); }

double all_reduce_sum(double v, Device dev) {
  Tensor t = tensor(std::vector<double>{v}, {}, dev);
  dist::all_reduce(t);
  return t.item<double>();
}

int run(const Flags& f) {
  dist::InitOptions init;
  init.backend = f.backend;
  if (f.timeout_s > 0) init.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  dist::init_process_group(init);
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device device = examples::training_device(f.device);

  auto train_set = data::load_fashion_mnist(f.data_dir, true);
  auto test_set = data::load_fashion_mnist(f.data_dir, false);
  auto train_sampler = std::make_shared<data::DistributedSampler>(*train_set, -1, -1, f.shuffle);
  auto test_sampler = std::make_shared<data::DistributedSampler>(*test_set, -1, -1, false);
  data::DataLoader train_loader(train_set, {.batch_size = f.batch_size, .sampler = train_sampler,
                                            .num_workers = f.workers, .device = device});
  data::DataLoader test_loader(test_set, {.batch_size = 1000, .sampler = test_sampler, .device = device});

  manual_seed(0);
  auto model = nn::Sequential(nn::Linear(784, 256), nn::ReLU(),
                                                nn::Linear(256, 128), nn::ReLU(),
                                                nn::Linear(128, 10));
  model->to(device);
  optim::SGD sgd(model->parameters(), optim::SGDOptions(f.lr).momentum(f.momentum));
  // Cosine decay from lr to 0 over the run, stepped once per epoch.
  std::unique_ptr<optim::CosineAnnealingLR> scheduler;
  if (f.cosine) scheduler = std::make_unique<optim::CosineAnnealingLR>(sgd, f.epochs);
  Checkpoint state;  // what --checkpoint saves and --resume loads
  state.model = model.get();
  state.optimizer = &sgd;
  state.scheduler = scheduler.get();
  int start_epoch = 0;
  if (!f.init.empty()) {
    Checkpoint weights;
    weights.model = model.get();
    load_checkpoint(f.init, weights);
  }
  // A restarted job (launch --max_restarts) picks up its own last checkpoint.
  std::string resume = f.resume;
  if (resume.empty() && !f.checkpoint.empty() && ::access(f.checkpoint.c_str(), F_OK) == 0) resume = f.checkpoint;
  if (!resume.empty()) start_epoch = static_cast<int>(load_checkpoint(resume, state).epoch) + 1;
  dist::DDPOptions ddp_opts;
  if (device.is_cuda()) ddp_opts.device_ids = {device.index};
  dist::DistributedDataParallel ddp(model, ddp_opts);
  nn::CrossEntropyLoss criterion;
  const bool tty = rank == 0 && ::isatty(STDOUT_FILENO);
  if (rank == 0)
    std::printf("train_eval: %d rank(s), backend %s, device %s, batch %ld per rank, %ld training samples%s\n", world,
                dist::get_backend().c_str(), device.str().c_str(), long(f.batch_size), long(train_set->size()),
                start_epoch ? (", resuming after epoch " + std::to_string(start_epoch - 1)).c_str() : "");

  for (int epoch = start_epoch; epoch < f.epochs; ++epoch) {
    const double lr = sgd.lr(0);
    train_loader.set_epoch(epoch);
    ddp.train();
    double loss_sum = 0, seen = 0;
    int64_t step = 0, steps = train_loader.size();
    auto t0 = Clock::now();
    const bool first_epoch = epoch == start_epoch, fault_here = f.fault_rank < 0 || f.fault_rank == rank;
    for (auto& batch : train_loader) {
      if (first_epoch && fault_here && step == f.sigkill_at_step) {
        std::fprintf(stderr, "train_eval: rank %d: --sigkill-at-step %ld: killing itself\n", rank, long(step));
        ::kill(::getpid(), SIGKILL);
      }
      sgd.zero_grad();
      Tensor loss = criterion(ddp(batch.input), batch.target);
      if (first_epoch && fault_here && step == f.inject_nan_at_step) loss = loss * NAN;  // as a diverged step
      loss.backward();
      sgd.step();
      double l = loss.item<float>();
      LOCKSTEP_CHECK(!f.stop_on_nan || std::isfinite(l), "loss is ", loss_text(l), " at epoch ", epoch, " step ", step,
                     " on rank ", rank, " (stopping; pass --no-stop-on-nan to continue)");
      loss_sum += l * batch.input.size(0);
      seen += batch.input.size(0);
      ++step;
      if (tty && (step % 20 == 0 || step == steps))
        std::printf("\repoch %d [%-30s] %ld/%ld", epoch, std::string(30 * step / steps, '=').c_str(), long(step),
                    long(steps)), std::fflush(stdout);
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    double global_loss = all_reduce_sum(loss_sum, device) / all_reduce_sum(seen, device);
    double samples_per_s = all_reduce_sum(seen, device) / secs;

    // Evaluation: each rank counts its shard; samples the sampler repeated to pad the shards are not counted.
    NoGradGuard no_grad;
    model->eval();
    const int64_t n = test_set->size(), mine = (n - rank + world - 1) / world;
    int64_t correct = 0, counted = 0;
    for (auto& batch : test_loader) {
      int64_t valid = std::min<int64_t>(batch.input.size(0), mine - counted);
      if (valid <= 0) break;
      Tensor hit = eq(argmax(model(batch.input), 1), batch.target);
      if (valid < hit.numel()) hit = index_select(hit, arange(valid, TensorOptions(kInt64, device)));
      correct += sum(hit).item<int64_t>();
      counted += valid;
    }
    double total = all_reduce_sum(static_cast<double>(counted), device);
    double acc = all_reduce_sum(static_cast<double>(correct), device) / total;
    if (rank == 0) {
      if (tty) std::printf("\r%*s\r", 60, "");
      std::printf("epoch %d loss %.4f test_acc %.4f samples_per_s %.0f lr %.4f\n", epoch, global_loss, acc,
                  samples_per_s, lr);
      std::fflush(stdout);
    }
    if (scheduler) scheduler->step();  // every rank: the lr of the next epoch
    if (rank == 0 && !f.checkpoint.empty()) {
      state.epoch = epoch;
      save_checkpoint(f.checkpoint, state);
    }
    dist::barrier();  // nobody resumes from a checkpoint rank 0 is still writing
    const char* restarts = std::getenv("LOCKSTEP_RESTART_COUNT");
    if (epoch == f.fail_at_epoch && (!restarts || std::string(restarts) == "0")) {
      std::fprintf(stderr, "train_eval: rank %d: --fail-at-epoch %d: exiting abruptly\n", rank, epoch);
      std::_Exit(3);
    }
  }
  if (rank == 0 && !f.save.empty()) {
    Checkpoint weights;  // the model alone: the file PyTorch's load_file + load_state_dict reads as it is
    weights.model = model.get();
    weights.epoch = f.epochs - 1;
    save_checkpoint(f.save, weights);
  }
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fashion-MNIST MLP with DistributedDataParallel (run it under launch)"};
  Flags f;
  app.add_option("--epochs", f.epochs, "epochs");
  app.add_option("--batch-size", f.batch_size, "batch size per rank");
  app.add_option("--lr", f.lr, "peak learning rate");
  app.add_option("--momentum", f.momentum, "SGD momentum");
  app.add_option("--shuffle", f.shuffle, "shuffle the training set each epoch (true/false)");
  app.add_option("--cosine", f.cosine, "cosine learning-rate decay over the epochs (true/false)");
  app.add_option("--backend", f.backend, "gloo, nccl, mpi (under mpirun) or auto");
  app.add_option("--device", f.device, "cpu, cuda or auto (cuda:LOCAL_RANK with nccl)");
  app.add_option("--data-dir", f.data_dir, "directory with the Fashion-MNIST IDX files");
  app.add_option("--init", f.init, "load initial weights from this safetensors file");
  app.add_option("--save", f.save, "write the final state_dict here (safetensors)");
  app.add_option("--checkpoint", f.checkpoint, "write a resumable checkpoint here after every epoch");
  app.add_option("--resume", f.resume, "continue from this checkpoint");
  app.add_option("--timeout", f.timeout_s, "process-group timeout in seconds");
  app.add_option("--workers", f.workers, "DataLoader worker threads");
  app.add_option("--fail-at-epoch", f.fail_at_epoch,
                 "testing: exit abruptly after this epoch's checkpoint, on the first attempt only");
  app.add_option("--fault-rank", f.fault_rank, "testing: the rank the step faults below hit (default: every rank)");
  app.add_option("--inject-nan-at-step", f.inject_nan_at_step,
                 "testing: make the loss NaN at this step of the first epoch run");
  app.add_option("--sigkill-at-step", f.sigkill_at_step,
                 "testing: SIGKILL the process before this step of the first epoch run");
  app.add_flag("!--no-stop-on-nan", f.stop_on_nan, "keep going when the loss is NaN or Inf");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_eval: %s\n", e.what());
    return 1;
  }
}
