// resnet: ResNet-20 (examples/resnet/model.h; He et al. 2015, section 4.2) learns Fashion-MNIST with
// DistributedDataParallel, as the CIFAR-10 programs train it: SGD with Nesterov momentum 0.9 and weight
// decay 5e-4, OneCycleLR stepped per optimizer step (PyTorch's defaults: warm-up over the first 30% of
// the steps from --lr / 25 to --lr, then cosine down to --lr / 25e4, momentum cycled 0.95 -> 0.85 ->
// 0.95), CrossEntropyLoss. The images are used as they are, 1 x 28 x 28 (the stages run at 28, 14 and
// 7 pixels where CIFAR's run at 32, 16 and 8); --synthetic N trains on N random CIFAR-shaped images
// (3 x 32 x 32) instead, for timing. --sync-bn normalizes over the batches of all ranks. Every
// --log-every steps and at the end of each epoch rank 0 writes a metrics record (the global loss since
// the last record, lr, samples/s; at epoch ends the global test accuracy) and rewrites the checkpoint
// (model, optimizer, scheduler, step), so a resumed run continues mid-epoch where it stopped.
//
//   launch --nproc_per_node=2 bazel-bin/examples/resnet --epochs 30 --metrics m.jsonl --plot m.svg
//   resnet --bench-steps 20 --synthetic 1280     # step time at CIFAR's shape, batch 128

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "data/api.h"
#include "distributed/api.h"
#include "distributed/ddp.h"
#include "examples/common/classify.h"
#include "examples/common/train_loop.h"
#include "examples/common/train_device.h"
#include "examples/common/train_flags.h"
#include "examples/resnet/model.h"
#include "nn/api.h"
#include "optim/api.h"
#include "optim/checkpoint.h"

using namespace lockstep;

namespace {

struct Flags : examples::TrainFlags {
  std::string data_dir = data::kFashionMnistDir;
  double momentum = 0.9, weight_decay = 5e-4;
  int64_t blocks = 3, width = 16;
  bool shuffle = true, sync_bn = false, float64 = false;
  int64_t train_limit = -1, test_limit = -1, log_every = 100, bench_steps = 0, synthetic = 0;
  uint64_t seed = 0;
};

// n random 3 x 32 x 32 images (standard normal) with random labels, drawn after manual_seed(seed).
std::shared_ptr<data::TensorDataset> synthetic_images(int64_t n, uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<data::TensorDataset>(randn({n, 3, 32, 32}), randint(0, 10, {n}));
}

int run(const Flags& f) {
  LOCKSTEP_CHECK(f.epochs > 0 && f.batch_size > 0 && f.log_every > 0, "--epochs (", f.epochs,
                 "), --batch-size (", f.batch_size, ") and --log-every (", f.log_every, ") must be positive");
  LOCKSTEP_CHECK(f.bench_steps >= 0 && f.steps >= -1 && f.synthetic >= 0, "--bench-steps (", f.bench_steps,
                 "), --synthetic (", f.synthetic, ") and --steps (", f.steps,
                 ") must be non-negative (--steps -1: every epoch)");
  dist::InitOptions init;
  init.backend = f.backend;
  if (f.timeout_s > 0) init.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  dist::init_process_group(init);
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device device = examples::training_device(f.device);

  auto train_set = f.synthetic ? synthetic_images(f.synthetic, f.seed + 1)
                               : examples::fashion_mnist_images(f.data_dir, true, f.train_limit, "--train-limit");
  auto test_set = f.synthetic ? synthetic_images(std::max<int64_t>(f.synthetic / 5, 1), f.seed + 2)
                              : examples::fashion_mnist_images(f.data_dir, false, f.test_limit, "--test-limit");
  if (f.float64) {  // widened after the 256-value table, as the twin's --float64
    train_set = std::make_shared<data::TensorDataset>(train_set->inputs().to(kFloat64), train_set->targets());
    test_set = std::make_shared<data::TensorDataset>(test_set->inputs().to(kFloat64), test_set->targets());
  }
  auto train_sampler = std::make_shared<data::DistributedSampler>(*train_set, -1, -1, f.shuffle, f.seed);
  auto test_sampler = std::make_shared<data::DistributedSampler>(*test_set, -1, -1, false);
  data::DataLoader train_loader(train_set, {.batch_size = f.batch_size, .sampler = train_sampler, .device = device});
  data::DataLoader test_loader(test_set, {.batch_size = 1000, .sampler = test_sampler, .device = device});
  const int64_t steps_per_epoch = train_loader.size();
  const int64_t total_steps = f.steps >= 0 ? f.steps : f.epochs * steps_per_epoch;
  LOCKSTEP_CHECK(total_steps <= f.epochs * steps_per_epoch, "--steps ", f.steps, " is more than the ",
                 f.epochs * steps_per_epoch, " steps of --epochs ", f.epochs, " (", steps_per_epoch, " per epoch)");

  manual_seed(f.seed);  // the same initial weights on every rank and every run
  examples::ResNet model(examples::ResNetOptions{.in_channels = train_set->inputs().size(1),
                                                 .blocks_per_stage = f.blocks, .width = f.width,
                                                 .sync_bn = f.sync_bn});
  if (!f.init.empty()) {
    Checkpoint weights;
    weights.model = model.get();
    load_checkpoint(f.init, weights);
  }
  if (f.float64) model->to(kFloat64);
  model->to(device);
  optim::SGD opt(model->parameters(),
                 optim::SGDOptions(f.lr).momentum(f.momentum).nesterov(true).weight_decay(f.weight_decay));
  // The schedule spans --epochs, so a run cut short by --steps follows the long run's curve.
  optim::OneCycleLR scheduler(opt, optim::OneCycleLROptions(f.lr).epochs(f.epochs).steps_per_epoch(steps_per_epoch));
  Checkpoint state;  // what --checkpoint saves and --resume loads
  state.model = model.get();
  state.optimizer = &opt;
  state.scheduler = &scheduler;
  const examples::ResumePoint from = examples::resume_classifier(state, f, steps_per_epoch);
  const int64_t step = from.step;
  dist::DDPOptions ddp_opts;
  if (device.is_cuda()) ddp_opts.device_ids = {device.index};
  dist::DistributedDataParallel ddp(model.ptr(), ddp_opts);
  if (f.bench_steps > 0) {
    examples::bench_steps(ddp, opt, train_loader, device, f.bench_steps, f.batch_size, examples::autocast_bf16(f));
    dist::destroy_process_group();
    return 0;
  }

  if (rank == 0)
    std::printf("resnet: ResNet-%ld, %d rank(s), backend %s, device %s, batch %ld per rank, %ld training samples, "
                "%ld steps per epoch%s\n",
                long(6 * f.blocks + 2), world, dist::get_backend().c_str(), device.str().c_str(), long(f.batch_size),
                long(train_set->size()), long(steps_per_epoch),
                step ? (", resuming after step " + std::to_string(step - 1)).c_str() : "");
  examples::ClassifierRun run{.ddp = ddp, .model = *model, .opt = opt, .scheduler = &scheduler,
                              .state = state, .train_loader = train_loader, .test_loader = test_loader,
                              .test_size = test_set->size(), .flags = f, .title = "resnet: ResNet-" + std::to_string(6 * f.blocks + 2) + " (Fashion-MNIST)",
                              .log_every = f.log_every, .total_steps = total_steps, .device = device,
                              .reseed_each_step = false, .seed = f.seed};
  examples::train_classifier(run, from);
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ResNet-20 (He et al. 2015) on Fashion-MNIST with DistributedDataParallel"};
  Flags f;
  f.epochs = 30;
  f.batch_size = 128;
  f.lr = 0.1;
  examples::add_train_flags(app, f);
  app.add_option("--momentum", f.momentum, "SGD's Nesterov momentum (OneCycleLR then cycles it 0.95 -> 0.85)")
      ->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "weight decay")->capture_default_str();
  app.add_option("--blocks", f.blocks, "BasicBlocks per stage: 3 is ResNet-20, 5 ResNet-32, 9 ResNet-56")
      ->capture_default_str();
  app.add_option("--width", f.width, "channels of the first stage (the others: 2x, 4x)")->capture_default_str();
  app.add_flag("!--no-shuffle", f.shuffle, "the training set in order every epoch");
  app.add_flag("--sync-bn", f.sync_bn, "SyncBatchNorm: batch statistics over all ranks");
  app.add_option("--train-limit", f.train_limit, "use only the first N training images");
  app.add_option("--test-limit", f.test_limit, "use only the first N test images");
  app.add_option("--synthetic", f.synthetic, "train on N random 3 x 32 x 32 images (CIFAR's shape) instead");
  app.add_flag("--float64", f.float64, "model and data in float64 (--init weights widened): for step-by-step "
               "comparisons with the twin's --float64 run");
  app.add_option("--log-every", f.log_every, "a metrics record (and checkpoint) every N steps, and at epoch ends")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "initial weights and shuffling")->capture_default_str();
  app.add_option("--data-dir", f.data_dir, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--bench-steps", f.bench_steps, "time this many training steps (step_ms: the median) and exit");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resnet: %s\n", e.what());
    return 1;
  }
}
