// train_word_lm: pytorch/examples word_language_model's main.py loop for an RNN language model,
// data-parallel over the default process group (init_process_group first). The training text is laid
// out in world * batch_size columns (batchify) and each rank trains on its own batch_size of them, so 2
// ranks at batch B see exactly what 1 rank sees at batch 2B; DDP averages the gradients, which equals the
// gradient of the mean loss over all columns. Per bptt-long chunk: detach the state (repackage_hidden),
// forward, NLL loss, backward, clip_grad_norm_, then plain SGD by hand (p -= lr * grad). After each epoch
// the validation loss at batch eval_batch_size (every rank evaluates the whole set, with no collectives);
// when it does not improve, lr /= 4, else the weights are kept as the best. At the end the best weights
// are evaluated on the test set. Perplexity is exp(loss).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "examples/common/train_flags.h"
#include "examples/word_lm/model.h"

namespace lockstep::examples {

struct WordLMOptions {
  TrainFlags train;       // epochs, steps (a cap on optimizer steps in all), batch_size per rank, lr
  RNNModelConfig model;   // ntoken comes from the corpus
  std::string text;       // the text file; empty: the fortunes (read_fortunes)
  int64_t bptt = 35;
  double clip = 0.25;
  int64_t eval_batch_size = 10;
  int64_t log_interval = 200;  // batches between printed and logged training losses
  uint64_t seed = 1111;
  std::string export_init;     // write the initial weights here and stop before training
  bool eval = true;            // false: no validation or test (timing runs; the lr never anneals)
  bool quiet = false;          // no per-step output (tests)
};

struct WordLMResult {
  std::vector<double> losses;                          // per step: the mean over ranks
  std::vector<std::pair<int64_t, double>> val_losses;  // (epoch, loss) after each epoch
  double test_loss = 0;                                // of the best weights; 0 when no epoch ran
  int64_t ntoken = 0;
  double step_ms = 0, step_cpu_ms = 0;                 // medians over the steps after the first 3
};

// Runs on every rank of the initialised default process group; throws on bad options, naming them.
WordLMResult train_word_lm(const WordLMOptions& options);

}  // namespace lockstep::examples
