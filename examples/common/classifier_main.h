// The main the image classifiers (cnn_fashion, resnet, vit) share, so that each example's main.cpp keeps
// only its model, optimizer, schedule and flags: the flags they all take, init_process_group, the
// device, Fashion-MNIST (or the example's own data) in DistributedSamplers, the initial weights (--seed,
// --init, --float64), resuming, DistributedDataParallel, --bench-steps, the banner, and train_loop.h's
// loop. Errors reach main as one line, "<name>: <what>", and exit status 1.
//
//   examples::ClassifierFlags f;  ... add_classifier_flags(app, f); CLI11_PARSE(app, argc, argv);
//   return examples::classifier_main(f, {.name = "vit", .build = ..., .optimizer = ..., .scheduler = ...});
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/api.h"
#include "examples/common/train_flags.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace lockstep::examples {

struct ClassifierFlags : TrainFlags {
  std::string data_dir = data::kFashionMnistDir;
  int64_t train_limit = -1, test_limit = -1, log_every = 100, bench_steps = 0;
  uint64_t seed = 0;
  bool shuffle = true;   // --no-shuffle, where the example offers it
  bool float64 = false;  // --float64, where the example offers it
  std::string shard = "none";  // --shard: none (DDP), optimizer (ZeRO-1) or full (fully_shard)
};

// TrainFlags' flags and the classifiers': --train-limit, --test-limit, --log-every, --seed (`seed_help`
// says what it seeds), --data-dir, --bench-steps, --shard; with `comparisons`, also --no-shuffle and --float64
// (the step-by-step comparisons with a twin).
void add_classifier_flags(CLI::App& app, ClassifierFlags& f, const std::string& seed_help, bool comparisons);

// The training and test sets: [N, C, H, W] images and int64 labels.
using ImageSets = std::pair<std::shared_ptr<data::TensorDataset>, std::shared_ptr<data::TensorDataset>>;

// What one classifier is made of; classifier_main does the rest. The optional members have default
// initializers, so designated initializers may leave them out without -Wmissing-field-initializers.
struct Classifier {
  std::string name;   // error lines and the banner: "resnet"
  std::string title;  // the plot's: "resnet: ResNet-20 (Fashion-MNIST)"
  // The model, built right after manual_seed(--seed), for images of `in_channels` channels.
  std::function<std::shared_ptr<nn::Module>(int64_t in_channels)> build;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> params)> optimizer;
  // --shard full: the modules made units before the root (a ViT's encoder layers); unset: the root alone.
  std::function<std::vector<std::shared_ptr<nn::Module>>(nn::Module& model)> units{};
  // Stepped once per optimizer step (may return null: no schedule).
  std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&, int64_t steps_per_epoch)> scheduler{};
  // The banner's description of the model ("ResNet-20"); empty: the name alone.
  std::function<std::string(const nn::Module&)> describe{};
  // The data; unset: Fashion-MNIST from --data-dir within --train-limit / --test-limit.
  std::function<ImageSets()> data{};
  // Seed the global generator from (seed, step, rank) before every step: dropout's masks then depend
  // on the step alone, so a resumed run draws the uninterrupted run's.
  bool reseed_each_step = true;
};

// Runs the example to the end (or --bench-steps) between init_process_group and
// destroy_process_group. Returns main's exit status.
int classifier_main(const ClassifierFlags& f, const Classifier& c);

}  // namespace lockstep::examples
