// cnn_fashion: the CNN of pytorch/examples mnist/main.py (examples/cnn_fashion_net.h) learns
// Fashion-MNIST with DistributedDataParallel. Per step: the rank's batch from a DistributedSampler,
// CrossEntropyLoss, backward (gradients averaged over the ranks), an optimizer step (Adam by default;
// --optimizer adadelta is mnist/main.py's own choice) and a per-step lr schedule (cosine to 0 over
// --epochs by default; x0.7 per epoch, mnist/main.py's StepLR, with Adadelta). Every --log-every steps and at the
// end of each epoch rank 0 writes a metrics record (the global loss since the last record, lr,
// samples/s; at epoch ends the global test accuracy) and rewrites the checkpoint, which holds model,
// optimizer, scheduler and the step, so a resumed run continues mid-epoch exactly where it stopped:
// the sampler's order is a function of the epoch, and dropout's masks one of (seed, step, rank).
//
//   launch --nproc_per_node=2 bazel-bin/examples/cnn_fashion --epochs 15 --metrics m.jsonl --plot m.svg
//   cnn_fashion --bench-steps 50        # step time, with a forward/backward/all-reduce/optimizer split

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "data/api.h"
#include "distributed/api.h"
#include "distributed/ddp.h"
#include "examples/cnn_fashion_net.h"
#include "examples/common/classify.h"
#include "examples/common/train_loop.h"
#include "examples/common/train_device.h"
#include "examples/common/train_flags.h"
#include "nn/api.h"
#include "optim/api.h"
#include "optim/checkpoint.h"
#include "tensor/cuda/cuda.h"

using namespace lockstep;
using lockstep::examples::CnnNet;
using lockstep::examples::CnnOptions;

namespace {

struct Flags : examples::TrainFlags {
  std::string optimizer = "adam", schedule = "cosine", data_dir = data::kFashionMnistDir;
  double momentum = 0.9, weight_decay = 0, step_gamma = 0.7;
  std::vector<int64_t> width = {32, 64, 128};
  bool dropout = true, shuffle = true, batch_norm = false, sync_bn = false, float64 = false;
  int64_t train_limit = -1, test_limit = -1, log_every = 100, bench_steps = 0;
  uint64_t seed = 0;
};


std::unique_ptr<optim::Optimizer> make_optimizer(const Flags& f, std::vector<Tensor> params) {
  if (f.optimizer == "sgd")
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions(f.lr).momentum(f.momentum).weight_decay(f.weight_decay));
  if (f.optimizer == "adam")
    return std::make_unique<optim::Adam>(params, optim::AdamOptions(f.lr).weight_decay(f.weight_decay));
  if (f.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(f.lr).weight_decay(f.weight_decay));
  if (f.optimizer == "adadelta")
    return std::make_unique<optim::Adadelta>(params, optim::AdadeltaOptions(f.lr).weight_decay(f.weight_decay));
  LOCKSTEP_CHECK(false, "--optimizer must be sgd, adam, adamw or adadelta, got '", f.optimizer, "'");
  return nullptr;
}

// Stepped once per optimizer step, so a run resumed mid-epoch has its lr.
std::unique_ptr<optim::LRScheduler> make_scheduler(const Flags& f, optim::Optimizer& opt, int64_t steps_per_epoch) {
  if (f.schedule == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, f.epochs * steps_per_epoch);
  if (f.schedule == "step") return std::make_unique<optim::StepLR>(opt, steps_per_epoch, f.step_gamma);
  LOCKSTEP_CHECK(f.schedule == "none", "--schedule must be cosine, step or none, got '", f.schedule,
                 "'");
  return nullptr;
}

int run(const Flags& f) {
  LOCKSTEP_CHECK(f.width.size() == 3, "--width takes conv1,conv2,hidden, got ", f.width.size(),
                 " numbers");
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

  CnnOptions net_options{.conv1_channels = f.width[0], .conv2_channels = f.width[1], .hidden = f.width[2],
                         .dropout = f.dropout};
  if (f.batch_norm) net_options.norm = CnnOptions::Norm::kBatch;
  if (f.sync_bn) net_options.norm = CnnOptions::Norm::kSync;
  manual_seed(f.seed);  // the same initial weights on every rank and every run
  CnnNet model(net_options);
  model->to(device);
  auto opt = make_optimizer(f, model->parameters());
  auto scheduler = make_scheduler(f, *opt, steps_per_epoch);
  if (!f.init.empty()) {
    Checkpoint weights;
    weights.model = model.get();
    load_checkpoint(f.init, weights);
  }
  if (f.float64) model->to(kFloat64);  // the optimizer's handles follow (Module::to rewrites in place)
  Checkpoint state;  // what --checkpoint saves and --resume loads
  state.model = model.get();
  state.optimizer = opt.get();
  state.scheduler = scheduler.get();
  const examples::ResumePoint from = examples::resume_classifier(state, f, steps_per_epoch);
  const int64_t step = from.step;
  dist::DDPOptions ddp_opts;
  if (device.is_cuda()) ddp_opts.device_ids = {device.index};
  dist::DistributedDataParallel ddp(model.ptr(), ddp_opts);
  if (f.bench_steps > 0) {
    examples::bench_steps(ddp, *opt, train_loader, device, f.bench_steps, f.batch_size, examples::autocast_bf16(f));
    dist::destroy_process_group();
    return 0;
  }

  if (rank == 0)
    std::printf("cnn_fashion: %d rank(s), backend %s, device %s, batch %ld per rank, %ld training samples, %ld steps "
                "per epoch%s\n",
                world, dist::get_backend().c_str(), device.str().c_str(), long(f.batch_size), long(train_set->size()),
                long(steps_per_epoch), step ? (", resuming after step " + std::to_string(step - 1)).c_str() : "");
  examples::ClassifierRun run{.ddp = ddp, .model = *model, .opt = *opt, .scheduler = scheduler.get(),
                              .state = state, .train_loader = train_loader, .test_loader = test_loader,
                              .test_size = test_set->size(), .flags = f, .title = "cnn_fashion (Fashion-MNIST)",
                              .log_every = f.log_every, .total_steps = total_steps, .device = device,
                              .reseed_each_step = true, .seed = f.seed};
  examples::train_classifier(run, from);
  dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fashion-MNIST CNN (pytorch/examples mnist/main.py's Net) with DistributedDataParallel"};
  Flags f;
  f.epochs = 15;
  f.batch_size = 64;
  f.lr = 1e-3;
  examples::add_train_flags(app, f);
  app.add_option("--optimizer", f.optimizer, "sgd, adam, adamw or adadelta (mnist/main.py's: with it --lr defaults "
                 "to 1.0 and --schedule to step, as there)")->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "weight decay (AdamW: decoupled)")->capture_default_str();
  app.add_option("--schedule", f.schedule, "lr schedule, stepped per step: cosine (to 0 over --epochs), step "
                 "(x --gamma each epoch, as mnist/main.py's StepLR) or none")->capture_default_str();
  app.add_option("--gamma", f.step_gamma, "the step schedule's factor per epoch")->capture_default_str();
  app.add_option("--width", f.width, "conv1 channels, conv2 channels, fc1 width")->delimiter(',')->expected(3)
      ->capture_default_str();
  app.add_flag("!--no-dropout", f.dropout, "leave out both dropouts (for step-by-step comparisons)");
  app.add_flag("!--no-shuffle", f.shuffle, "the training set in order every epoch");
  app.add_flag("--batch-norm", f.batch_norm, "BatchNorm2d after each convolution");
  app.add_flag("--float64", f.float64, "model and data in float64 (--init weights widened): for step-by-step "
               "comparisons with the twin's --float64 run");
  app.add_flag("--sync-bn", f.sync_bn, "SyncBatchNorm (statistics over all ranks) after each convolution");
  app.add_option("--train-limit", f.train_limit, "use only the first N training images");
  app.add_option("--test-limit", f.test_limit, "use only the first N test images");
  app.add_option("--log-every", f.log_every, "a metrics record (and checkpoint) every N steps, and at epoch ends")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "initial weights, shuffling and dropout")->capture_default_str();
  app.add_option("--data-dir", f.data_dir, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--bench-steps", f.bench_steps, "time this many training steps (step_ms: the median) and exit");
  CLI11_PARSE(app, argc, argv);
  if (f.optimizer == "adadelta") {  // mnist/main.py's defaults: Adadelta(lr=1.0), StepLR(step_size=1, gamma=0.7)
    if (!app.count("--lr")) f.lr = 1.0;
    if (!app.count("--schedule")) f.schedule = "step";
  }
  try {
    return run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn_fashion: %s\n", e.what());
    return 1;
  }
}
