// The image classifiers' shared main (classifier_main.h).
#include "examples/common/classifier_main.h"

#include <cstdio>

#include "distributed/api.h"
#include "distributed/ddp.h"
#include "examples/common/classify.h"
#include "examples/common/train_device.h"
#include "examples/common/train_loop.h"
#include "optim/checkpoint.h"

namespace lockstep::examples {

void add_classifier_flags(CLI::App& app, ClassifierFlags& f, const std::string& seed_help, bool comparisons) {
  add_train_flags(app, f);
  app.add_option("--train-limit", f.train_limit, "use only the first N training images");
  app.add_option("--test-limit", f.test_limit, "use only the first N test images");
  app.add_option("--log-every", f.log_every, "a metrics record (and checkpoint) every N steps, and at epoch ends")
      ->capture_default_str();
  app.add_option("--seed", f.seed, seed_help)->capture_default_str();
  app.add_option("--data-dir", f.data_dir, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--bench-steps", f.bench_steps, "time this many training steps (step_ms: the median) and exit");
  add_shard_flag(app, f.shard);
  if (!comparisons) return;
  app.add_flag("!--no-shuffle", f.shuffle, "the training set in order every epoch");
  app.add_flag("--float64", f.float64, "model and data in float64 (--init weights widened): for step-by-step "
               "comparisons with the twin's --float64 run");
}

namespace {

int run(const ClassifierFlags& f, const Classifier& c) {
  LOCKSTEP_CHECK(f.epochs > 0 && f.batch_size > 0 && f.log_every > 0, "--epochs (", f.epochs,
                 "), --batch-size (", f.batch_size, ") and --log-every (", f.log_every, ") must be positive");
  LOCKSTEP_CHECK(f.bench_steps >= 0 && f.steps >= -1, "--bench-steps (", f.bench_steps, ") and --steps (", f.steps,
                 ") must be non-negative (--steps -1: every epoch)");
  LOCKSTEP_CHECK(!(f.float64 && autocast_bf16(f)), "--float64 and --dtype bfloat16 exclude each other (autocast "
                 "leaves float64 as it is)");
  init_process_group(f);
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device device = training_device(f.device);

  auto [train_set, test_set] =
      c.data ? c.data()
             : ImageSets{fashion_mnist_images(f.data_dir, true, f.train_limit, "--train-limit"),
                         fashion_mnist_images(f.data_dir, false, f.test_limit, "--test-limit")};
  if (f.float64) {  // widened after the 256-value table, as the twins' --float64
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
  std::shared_ptr<nn::Module> model = c.build(train_set->inputs().size(1));
  if (!f.init.empty()) {
    Checkpoint weights;
    weights.model = model.get();
    load_checkpoint(f.init, weights);
  }
  if (f.float64) model->to(kFloat64);
  model->to(device);
  int64_t n_params = 0;  // before --shard full leaves each rank a part
  for (const Tensor& p : model->parameters()) n_params += p.numel();
  // One param group; --shard full makes the whole model one unit, or each of c.units first.
  Sharding sharding(f.shard, model, c.units ? c.units(*model) : std::vector<std::shared_ptr<nn::Module>>{},
                    [](const std::vector<Tensor>& ps) { return std::vector<std::vector<Tensor>>{ps}; },
                    [&](std::vector<std::vector<Tensor>> g) { return c.optimizer(std::move(g[0])); });
  optim::Optimizer& opt = sharding.optimizer();
  std::unique_ptr<optim::LRScheduler> scheduler = c.scheduler ? c.scheduler(opt, steps_per_epoch) : nullptr;
  Checkpoint state;  // what --checkpoint saves and --resume loads, with the sharding's optimizer
  state.model = model.get();
  state.scheduler = scheduler.get();
  const ResumePoint from = resume_classifier(sharding, state, f, steps_per_epoch);  // before DDP broadcasts rank 0's
  dist::DDPOptions ddp_opts;
  if (device.is_cuda()) ddp_opts.device_ids = {device.index};
  sharding.wrap(ddp_opts);
  if (f.bench_steps > 0) {
    bench_steps(sharding, train_loader, device, f.bench_steps, f.batch_size, autocast_bf16(f));
    return 0;
  }

  if (rank == 0) {
    const std::string what = c.describe ? c.describe(*model) + ", " : "";
    std::printf("%s: %s%ld parameters; %d rank(s), backend %s, device %s, %s, batch %ld per rank, %ld training "
                "samples, %ld steps per epoch, --shard %s%s\n",
                c.name.c_str(), what.c_str(), long(n_params), world, dist::get_backend().c_str(), device.str().c_str(),
                f.dtype.c_str(), long(f.batch_size), long(train_set->size()), long(steps_per_epoch), f.shard.c_str(),
                from.step ? (", resuming after step " + std::to_string(from.step - 1)).c_str() : "");
  }
  ClassifierRun run{.sharding = sharding, .model = *model, .opt = opt, .scheduler = scheduler.get(), .state = state,
                    .train_loader = train_loader, .test_loader = test_loader, .test_size = test_set->size(),
                    .flags = f, .title = c.title, .log_every = f.log_every, .total_steps = total_steps,
                    .device = device, .reseed_each_step = c.reseed_each_step, .seed = f.seed};
  train_classifier(run, from);
  return 0;
}

}  // namespace

int classifier_main(const ClassifierFlags& f, const Classifier& c) {
  try {
    const int status = run(f, c);
    dist::destroy_process_group();
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", c.name.c_str(), e.what());
    return 1;
  }
}

}  // namespace lockstep::examples
