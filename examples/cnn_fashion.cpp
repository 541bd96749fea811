// cnn_fashion: the CNN of pytorch/examples mnist/main.py (examples/cnn_fashion_net.h) learns
// Fashion-MNIST with DistributedDataParallel. Per step: the rank's batch from a DistributedSampler,
// CrossEntropyLoss, backward (gradients averaged over the ranks), an optimizer step (Adam by default;
// --optimizer adadelta is mnist/main.py's own choice) and a per-step lr schedule (cosine to 0 over
// --epochs by default; x0.7 per epoch, mnist/main.py's StepLR, with Adadelta). Every --log-every steps and at the
// end of each epoch rank 0 writes a metrics record (the global loss since the last record, lr,
// samples/s; at epoch ends the global test accuracy) and rewrites the checkpoint, which holds model,
// optimizer, scheduler and the step, so a resumed run continues mid-epoch exactly where it stopped:
// the sampler's order is a function of the epoch, and dropout's masks one of (seed, step, rank).
// --dtype bfloat16 runs forward and loss under autocast. The main around the model, optimizer and
// schedule is the classifiers' shared one (examples/common/classifier_main.h).
//
//   launch --nproc_per_node=2 bazel-bin/examples/cnn_fashion --epochs 15 --metrics m.jsonl --plot m.svg
//   cnn_fashion --bench-steps 50        # step time, with a forward/backward/all-reduce/optimizer split

#include <CLI/CLI.hpp>

#include "examples/cnn_fashion_net.h"
#include "examples/common/classifier_main.h"
#include "optim/api.h"

using namespace lockstep;
using lockstep::examples::CnnNet;
using lockstep::examples::CnnOptions;

namespace {

struct Flags : examples::ClassifierFlags {
  std::string optimizer = "adam", schedule = "cosine";
  double momentum = 0.9, weight_decay = 0, step_gamma = 0.7;
  std::vector<int64_t> width = {32, 64, 128};
  bool dropout = true, batch_norm = false, sync_bn = false;
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fashion-MNIST CNN (pytorch/examples mnist/main.py's Net) with DistributedDataParallel"};
  Flags f;
  f.epochs = 15;
  f.batch_size = 64;
  f.lr = 1e-3;
  examples::add_classifier_flags(app, f, "initial weights, shuffling and dropout", /*comparisons=*/true);
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
  app.add_flag("--batch-norm", f.batch_norm, "BatchNorm2d after each convolution");
  app.add_flag("--sync-bn", f.sync_bn, "SyncBatchNorm (statistics over all ranks) after each convolution");
  CLI11_PARSE(app, argc, argv);
  if (f.optimizer == "adadelta") {  // mnist/main.py's defaults: Adadelta(lr=1.0), StepLR(step_size=1, gamma=0.7)
    if (!app.count("--lr")) f.lr = 1.0;
    if (!app.count("--schedule")) f.schedule = "step";
  }
  return examples::classifier_main(
      f, {.name = "cnn_fashion",
          .title = "cnn_fashion (Fashion-MNIST)",
          .build = [&](int64_t) -> std::shared_ptr<nn::Module> {
            LOCKSTEP_CHECK(f.width.size() == 3, "--width takes conv1,conv2,hidden, got ", f.width.size(), " numbers");
            CnnOptions o{.conv1_channels = f.width[0], .conv2_channels = f.width[1], .hidden = f.width[2],
                         .dropout = f.dropout};
            if (f.batch_norm) o.norm = CnnOptions::Norm::kBatch;
            if (f.sync_bn) o.norm = CnnOptions::Norm::kSync;
            return CnnNet(o).ptr();
          },
          .optimizer = [&](std::vector<Tensor> params) { return make_optimizer(f, std::move(params)); },
          .scheduler = [&](optim::Optimizer& opt, int64_t spe) { return make_scheduler(f, opt, spe); }});
}
