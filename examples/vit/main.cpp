// vit: a small Vision Transformer (examples/vit/model.h: 7 x 7 patches, 4 pre-norm encoder layers of width
// 64 built from nn::TransformerEncoderLayer) learns Fashion-MNIST with DistributedDataParallel: AdamW
// (weight decay 0.05), the lr cosine-annealed to 0 over the run and stepped per optimizer step,
// CrossEntropyLoss. Every --log-every steps and at the end of each epoch rank 0 writes a metrics
// record (the global loss since the last record, lr, samples/s; at epoch ends the global test
// accuracy) and rewrites the checkpoint (model, optimizer, scheduler, step), so a resumed run continues
// mid-epoch where it stopped (examples/common/classifier_main.h: the main and loop cnn_fashion and
// resnet share). --dtype bfloat16 runs forward and loss under autocast.
//
//   launch --nproc_per_node=2 bazel-bin/examples/vit --epochs 10 --metrics vit.jsonl --plot vit.svg
//   vit --bench-steps 20                            # step time, batch 64

#include <CLI/CLI.hpp>

#include "examples/common/classifier_main.h"
#include "examples/vit/model.h"
#include "optim/api.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"A Vision Transformer on Fashion-MNIST with DistributedDataParallel"};
  examples::ClassifierFlags f;
  f.epochs = 10;
  f.batch_size = 64;
  f.lr = 1e-3;
  double weight_decay = 0.05;
  examples::ViTOptions model;
  examples::add_classifier_flags(app, f, "initial weights, shuffling and dropout", /*comparisons=*/false);
  app.add_option("--weight-decay", weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  app.add_option("--patch", model.patch_size, "patch side (divides 28)")->capture_default_str();
  app.add_option("--dim", model.dim, "token width (d_model)")->capture_default_str();
  app.add_option("--depth", model.depth, "encoder layers")->capture_default_str();
  app.add_option("--heads", model.heads, "attention heads (divide --dim)")->capture_default_str();
  app.add_option("--mlp-dim", model.mlp_dim, "feed-forward width")->capture_default_str();
  app.add_option("--dropout", model.dropout, "dropout in the encoder layers")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return examples::classifier_main(
      f, {.name = "vit",
          .title = "vit: ViT (Fashion-MNIST)",
          .build = [&](int64_t) -> std::shared_ptr<nn::Module> { return examples::ViT(model).ptr(); },
          .optimizer = [&](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
            return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(f.lr).weight_decay(weight_decay));
          },
          // The schedule spans --epochs, so a run cut short by --steps follows the long run's curve.
          .scheduler = [&](optim::Optimizer& opt, int64_t spe) -> std::unique_ptr<optim::LRScheduler> {
            return std::make_unique<optim::CosineAnnealingLR>(opt, f.epochs * spe);
          },
          .describe = [&](const nn::Module&) {
            return "ViT dim " + std::to_string(model.dim) + ", depth " + std::to_string(model.depth) + ", " +
                   std::to_string(model.heads) + " heads";
          }});
}
