// gpt: a character-level GPT (nanoGPT's model and train.py loop) trained data-parallel on the fortunes
// (or --text FILE). The defaults are nanoGPT's CPU configuration for shakespeare_char.
//
//   launch --nproc_per_node=2 bazel-bin/examples/gpt --steps 2000 --metrics gpt.jsonl --plot gpt.svg
//
// tools/twins/gpt_twin.py is the same model and batches in PyTorch; --export-init writes the weights it starts from.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "distributed/init.h"
#include "examples/common/sharding.h"
#include "examples/common/train_device.h"
#include "examples/gpt/train.h"

using namespace lockstep;
using namespace lockstep::examples;

int main(int argc, char** argv) {
  CLI::App app{"character-level GPT (nanoGPT) with DistributedDataParallel (run it under launch)"};
  GPTTrainOptions o;
  o.train.steps = 2000;
  o.train.batch_size = 12;
  o.train.lr = 1e-3;
  add_train_flags(app, o.train);
  app.add_option("--text", o.text, "train on this text file (default: the fortunes in /usr/share/games/fortunes)");
  app.add_option("--n-layer", o.model.n_layer, "transformer blocks")->capture_default_str();
  app.add_option("--n-head", o.model.n_head, "attention heads")->capture_default_str();
  app.add_option("--n-embd", o.model.n_embd, "embedding width")->capture_default_str();
  app.add_option("--block-size", o.model.block_size, "context length")->capture_default_str();
  app.add_option("--dropout", o.model.dropout, "dropout probability")->capture_default_str();
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per step and rank")->capture_default_str();
  app.add_option("--warmup-iters", o.warmup_iters, "linear lr warmup steps")->capture_default_str();
  app.add_option("--lr-decay-iters", o.lr_decay_iters, "cosine decay ends here (-1: --steps)")->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "lr at the end of the decay")->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay of the 2-D weights")->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "clip the gradient norm to this (0: no clipping)")->capture_default_str();
  app.add_option("--eval-interval", o.eval_interval, "steps between validation losses")->capture_default_str();
  app.add_option("--eval-iters", o.eval_iters, "validation batches per rank")->capture_default_str();
  app.add_option("--log-interval", o.log_interval, "steps between metrics records")->capture_default_str();
  app.add_option("--checkpoint-interval", o.checkpoint_interval, "steps between checkpoints (-1: --eval-interval)")
      ->capture_default_str();
  app.add_option("--sample-tokens", o.sample_tokens, "characters generated at the end")->capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature")->capture_default_str();
  app.add_option("--top-k", o.top_k, "sample among the k most likely (0: all)")->capture_default_str();
  app.add_option("--seed", o.seed, "initialisation, batches and dropout")->capture_default_str();
  add_shard_flag(app, o.shard);
  app.add_option("--export-init", o.export_init, "write the initial weights (safetensors) here and exit");
  app.add_option("--stop-after", o.stop_after, "testing: checkpoint and exit after this many steps in all");
  app.add_option("--sigkill-at-step", o.sigkill_at_step,
                 "testing: the last rank SIGKILLs itself before this step, on the first attempt only");
  CLI11_PARSE(app, argc, argv);
  try {
    init_process_group(o.train);
    train_gpt(o);
    dist::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 1;
  }
}
