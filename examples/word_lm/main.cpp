// word_lm: pytorch/examples word_language_model (a 2-layer LSTM word-level language model, main.py's
// defaults) trained data-parallel on the fortunes (or --text FILE).
//
//   launch --nproc_per_node=1 bazel-bin/examples/word_lm --epochs 6 --metrics lm.jsonl --plot lm.svg
//
// tools/twins/word_lm_twin.py is the same program in PyTorch; --export-init writes the weights it starts from.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "distributed/init.h"
#include "examples/word_lm/train.h"

using namespace lockstep;
using namespace lockstep::examples;

int main(int argc, char** argv) {
  CLI::App app{"word-level RNN language model (pytorch/examples word_language_model), data-parallel"};
  WordLMOptions o;
  o.train.epochs = 40;
  o.train.batch_size = 20;
  o.train.lr = 20;
  add_train_flags(app, o.train);
  app.add_option("--text", o.text, "train on this text file (default: the fortunes in /usr/share/games/fortunes)");
  app.add_option("--model", o.model.rnn_type, "LSTM, GRU, RNN_TANH or RNN_RELU")->capture_default_str();
  app.add_option("--emsize", o.model.ninp, "size of the word embeddings")->capture_default_str();
  app.add_option("--nhid", o.model.nhid, "hidden units per layer")->capture_default_str();
  app.add_option("--nlayers", o.model.nlayers, "recurrent layers")->capture_default_str();
  app.add_option("--dropout", o.model.dropout, "dropout on the embeddings, between layers and on the output")
      ->capture_default_str();
  app.add_flag("--tied", o.model.tie_weights, "tie the decoder's weight to the encoder's (needs nhid == emsize)");
  app.add_option("--bptt", o.bptt, "sequence length")->capture_default_str();
  app.add_option("--clip", o.clip, "gradient clipping (max norm)")->capture_default_str();
  app.add_option("--eval-batch-size", o.eval_batch_size, "batch size of validation and test")->capture_default_str();
  app.add_option("--log-interval", o.log_interval, "batches between training losses")->capture_default_str();
  app.add_option("--seed", o.seed, "initialisation and dropout")->capture_default_str();
  bool no_eval = false;
  app.add_flag("--no-eval", no_eval, "skip validation and test (timing runs)");
  app.add_option("--export-init", o.export_init, "write the initial weights (safetensors) here and exit");
  CLI11_PARSE(app, argc, argv);
  o.eval = !no_eval;
  try {
    dist::InitOptions init;
    init.backend = o.train.backend;
    if (o.train.timeout_s > 0)
      init.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.train.timeout_s * 1000));
    dist::init_process_group(init);
    train_word_lm(o);
    dist::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "word_lm: %s\n", e.what());
    return 1;
  }
}
