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
// --dtype bfloat16 runs forward and loss under autocast (oneDNN's bf16 convolutions). The main around
// the model, optimizer and schedule is the classifiers' shared one (examples/common/classifier_main.h).
//
//   launch --nproc_per_node=2 bazel-bin/examples/resnet --epochs 30 --metrics m.jsonl --plot m.svg
//   resnet --bench-steps 20 --synthetic 1280     # step time at CIFAR's shape, batch 128

#include <CLI/CLI.hpp>
#include <algorithm>

#include "examples/common/classifier_main.h"
#include "examples/resnet/model.h"
#include "optim/api.h"

using namespace lockstep;

namespace {

struct Flags : examples::ClassifierFlags {
  double momentum = 0.9, weight_decay = 5e-4;
  int64_t blocks = 3, width = 16, synthetic = 0;
  bool sync_bn = false;
};

// n random 3 x 32 x 32 images (standard normal) with random labels, drawn after manual_seed(seed).
std::shared_ptr<data::TensorDataset> synthetic_images(int64_t n, uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<data::TensorDataset>(randn({n, 3, 32, 32}), randint(0, 10, {n}));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ResNet-20 (He et al. 2015) on Fashion-MNIST with DistributedDataParallel"};
  Flags f;
  f.epochs = 30;
  f.batch_size = 128;
  f.lr = 0.1;
  examples::add_classifier_flags(app, f, "initial weights and shuffling", /*comparisons=*/true);
  app.add_option("--momentum", f.momentum, "SGD's Nesterov momentum (OneCycleLR then cycles it 0.95 -> 0.85)")
      ->capture_default_str();
  app.add_option("--weight-decay", f.weight_decay, "weight decay")->capture_default_str();
  app.add_option("--blocks", f.blocks, "BasicBlocks per stage: 3 is ResNet-20, 5 ResNet-32, 9 ResNet-56")
      ->capture_default_str();
  app.add_option("--width", f.width, "channels of the first stage (the others: 2x, 4x)")->capture_default_str();
  app.add_flag("--sync-bn", f.sync_bn, "SyncBatchNorm: batch statistics over all ranks");
  app.add_option("--synthetic", f.synthetic, "train on N random 3 x 32 x 32 images (CIFAR's shape) instead")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  const std::string depth = "ResNet-" + std::to_string(6 * f.blocks + 2);
  examples::Classifier c{
      .name = "resnet",
      .title = "resnet: " + depth + " (Fashion-MNIST)",
      .build = [&](int64_t in_channels) -> std::shared_ptr<nn::Module> {
        return examples::ResNet(examples::ResNetOptions{
                                    .in_channels = in_channels, .blocks_per_stage = f.blocks, .width = f.width,
                                    .sync_bn = f.sync_bn})
            .ptr();
      },
      .optimizer = [&](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
        return std::make_unique<optim::SGD>(
            params, optim::SGDOptions(f.lr).momentum(f.momentum).nesterov(true).weight_decay(f.weight_decay));
      },
      // The schedule spans --epochs, so a run cut short by --steps follows the long run's curve.
      .scheduler = [&](optim::Optimizer& opt, int64_t spe) -> std::unique_ptr<optim::LRScheduler> {
        return std::make_unique<optim::OneCycleLR>(opt,
                                                   optim::OneCycleLROptions(f.lr).epochs(f.epochs).steps_per_epoch(spe));
      },
      .describe = [&](const nn::Module&) { return depth; },
      .reseed_each_step = false};
  if (f.synthetic)
    c.data = [&] {
      return examples::ImageSets{synthetic_images(f.synthetic, f.seed + 1),
                                 synthetic_images(std::max<int64_t>(f.synthetic / 5, 1), f.seed + 2)};
    };
  return examples::classifier_main(f, c);
}
