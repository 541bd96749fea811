// vit: a small Vision Transformer (examples/vit/model.h: 7 x 7 patches, 4 pre-norm encoder layers of width
// 64 built from nn::TransformerEncoderLayer) learns Fashion-MNIST with DistributedDataParallel: AdamW
// (weight decay 0.05), the lr cosine-annealed to 0 over the run and stepped per optimizer step,
// CrossEntropyLoss. Every --log-every steps and at the end of each epoch rank 0 writes a metrics
// record (the global loss since the last record, lr, samples/s; at epoch ends the global test
// accuracy) and rewrites the checkpoint (model, optimizer, scheduler, step), so a resumed run continues
// mid-epoch where it stopped (the training loop of examples/common/train_loop.h, as cnn_fashion's and
// resnet's).
//
//   launch --nproc_per_node=2 bazel-bin/examples/vit --epochs 10 --metrics vit.jsonl --plot vit.svg
//   vit --bench-steps 20                            # step time, batch 64

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "data/api.h"
#include "distributed/api.h"
#include "distributed/ddp.h"
#include "examples/common/classify.h"
#include "examples/common/train_device.h"
#include "examples/common/train_flags.h"
#include "examples/common/train_loop.h"
#include "examples/vit/model.h"
#include "nn/api.h"
#include "optim/api.h"
#include "optim/checkpoint.h"

using namespace lockstep;

namespace {

struct Flags : examples::TrainFlags {
  std::string data_dir = data::kFashionMnistDir;
  double weight_decay = 0.05;
  examples::ViTOptions model;
  int64_t train_limit = -1, test_limit = -1, log_every = 100, bench_steps = 0;
  uint64_t seed = 0;
};

int run(const Flags& f) {
  LOCKSTEP_CHECK(f.epochs > 0 && f.batch_size > 0 && f.log_every > 0, "--epochs (", f.epochs,
                 "), --batch-size (", f.batch_size, ") and --log-every (", f.log_every, ") must be positive");
  LOCKSTEP_CHECK(f.bench_steps >= 0 && f.steps >= -1, "--bench-steps (", f.bench_steps, ") and --steps (", f.steps,
                 ") must be non-negative (--steps -1: every epoch)");
  dist::InitOptions init;
  init.backend = f.backend;
  if (f.timeout_s > 0) init.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  dist::init_process_group(init);
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device device = examples::training_device(f.device);

  auto train_set = examples::fashion_mnist_images(f.data_dir, true, f.train_limit, "--train-limit");
  auto test_set = examples::fashion_mnist_images(f.data_dir, false, f.test_limit, "--test-limit");
  auto train_sampler = std::make_shared<data::DistributedSampler>(*train_set, -1, -1, true, f.seed);
  auto test_sampler = std::make_shared<data::DistributedSampler>(*test_set, -1, -1, false);
  data::DataLoader train_loader(train_set, {.batch_size = f.batch_size, .sampler = train_sampler, .device = device});
  data::DataLoader test_loader(test_set, {.batch_size = 1000, .sampler = test_sampler, .device = device});
  const int64_t steps_per_epoch = train_loader.size();
  const int64_t total_steps = f.steps >= 0 ? f.steps : f.epochs * steps_per_epoch;
  LOCKSTEP_CHECK(total_steps <= f.epochs * steps_per_epoch, "--steps ", f.steps, " is more than the ",
                 f.epochs * steps_per_epoch, " steps of --epochs ", f.epochs, " (", steps_per_epoch, " per epoch)");

  manual_seed(f.seed);  // the same initial weights on every rank and every run
  examples::ViT model(f.model);
  if (!f.init.empty()) {
    Checkpoint weights;
    weights.model = model.get();
    load_checkpoint(f.init, weights);
  }
  model->to(device);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(f.lr).weight_decay(f.weight_decay));
  // The schedule spans --epochs, so a run cut short by --steps follows the long run's curve.
  optim::CosineAnnealingLR scheduler(opt, f.epochs * steps_per_epoch);
  Checkpoint state;  // what --checkpoint saves and --resume loads
  state.model = model.get();
  state.optimizer = &opt;
  state.scheduler = &scheduler;
  const examples::ResumePoint from = examples::resume_classifier(state, f, steps_per_epoch);
  dist::DDPOptions ddp_opts;
  if (device.is_cuda()) ddp_opts.device_ids = {device.index};
  dist::DistributedDataParallel ddp(model.ptr(), ddp_opts);
  if (f.bench_steps > 0) {
    examples::bench_steps(ddp, opt, train_loader, device, f.bench_steps, f.batch_size, examples::autocast_bf16(f));
    dist::destroy_process_group();
    return 0;
  }

  int64_t n_params = 0;
  for (const Tensor& p : model->parameters()) n_params += p.numel();
  if (rank == 0)
    std::printf("vit: ViT dim %ld, depth %ld, %ld heads, %ld parameters; %d rank(s), backend %s, device %s, batch %ld "
                "per rank, %ld steps per epoch%s\n",
                long(f.model.dim), long(f.model.depth), long(f.model.heads), long(n_params), world,
                dist::get_backend().c_str(), device.str().c_str(), long(f.batch_size), long(steps_per_epoch),
                from.step ? (", resuming after step " + std::to_string(from.step - 1)).c_str() : "");
  examples::ClassifierRun run{.ddp = ddp, .model = *model, .opt = opt, .scheduler = &scheduler,
                              .state = state, .train_loader = train_loader, .test_loader = test_loader,
                              .test_size = test_set->size(), .flags = f, .title = "vit: ViT (Fashion-MNIST)",
                              .log_every = f.log_every, .total_steps = total_steps, .device = device,
                              .reseed_each_step = true, .seed = f.seed};
  examples::train_classifier(run, from);
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A Vision Transformer on Fashion-MNIST with DistributedDataParallel"};
  Flags f;
  f.epochs = 10;
  f.batch_size = 64;
  f.lr = 1e-3;
  examples::add_train_flags(app, f);
  app.add_option("--weight-decay", f.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  app.add_option("--patch", f.model.patch_size, "patch side (divides 28)")->capture_default_str();
  app.add_option("--dim", f.model.dim, "token width (d_model)")->capture_default_str();
  app.add_option("--depth", f.model.depth, "encoder layers")->capture_default_str();
  app.add_option("--heads", f.model.heads, "attention heads (divide --dim)")->capture_default_str();
  app.add_option("--mlp-dim", f.model.mlp_dim, "feed-forward width")->capture_default_str();
  app.add_option("--dropout", f.model.dropout, "dropout in the encoder layers")->capture_default_str();
  app.add_option("--train-limit", f.train_limit, "use only the first N training images");
  app.add_option("--test-limit", f.test_limit, "use only the first N test images");
  app.add_option("--log-every", f.log_every, "a metrics record (and checkpoint) every N steps, and at epoch ends")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "initial weights, shuffling and dropout")->capture_default_str();
  app.add_option("--data-dir", f.data_dir, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--bench-steps", f.bench_steps, "time this many training steps (step_ms: the median) and exit");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vit: %s\n", e.what());
    return 1;
  }
}
