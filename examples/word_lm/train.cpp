// train_word_lm: the data-parallel training loop of examples/word_lm (see train.h).
#include "examples/word_lm/train.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "distributed/ddp.h"
#include "distributed/init.h"
#include "examples/common/fortunes.h"
#include "examples/common/metrics_log.h"
#include "examples/common/train_device.h"
#include "examples/word_lm/corpus.h"
#include "nn/utils/clip_grad.h"
#include "examples/common/step_timing.h"
#include "optim/checkpoint.h"

namespace lockstep::examples {
namespace {

double all_reduce_mean(double v, Device dev) {
  Tensor t = tensor(std::vector<double>{v}, {}, dev);
  dist::all_reduce(t);
  return t.item<double>() / dist::get_world_size();
}

void check_options(const WordLMOptions& o) {
  const TrainFlags& f = o.train;
  LOCKSTEP_CHECK(f.epochs > 0 && f.steps != 0, "train_word_lm: --epochs must be positive and --steps positive or -1, "
                 "got ", f.epochs, " and ", f.steps);
  LOCKSTEP_CHECK(f.batch_size > 0 && o.eval_batch_size > 0 && o.bptt > 0, "train_word_lm: --batch-size, "
                 "--eval-batch-size and --bptt must be positive, got ", f.batch_size, ", ", o.eval_batch_size, ", ",
                 o.bptt);
  LOCKSTEP_CHECK(f.lr > 0 && o.clip > 0 && o.log_interval > 0, "train_word_lm: --lr, --clip and --log-interval must "
                 "be positive, got ", f.lr, ", ", o.clip, ", ", o.log_interval);
  LOCKSTEP_CHECK(f.checkpoint.empty() && f.resume.empty(), "train_word_lm: --checkpoint and --resume are not "
                 "supported (main.py keeps only the best weights: use --save)");
}

}  // namespace

WordLMResult train_word_lm(const WordLMOptions& o) {
  check_options(o);
  const TrainFlags& f = o.train;
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device device = examples::training_device(f.device);
  const bool talk = rank == 0 && !o.quiet;

  const Corpus corpus(o.text.empty() ? read_fortunes() : read_text_file(o.text));
  RNNModelConfig config = o.model;
  config.ntoken = corpus.dictionary().size();
  manual_seed(o.seed);
  RNNModel model(config);
  if (!f.init.empty()) {
    Checkpoint weights;
    weights.model = model.get();
    load_checkpoint(f.init, weights);
  }
  WordLMResult result;
  result.ntoken = config.ntoken;
  if (!o.export_init.empty()) {
    if (rank == 0) {
      Checkpoint weights;
      weights.model = model.get();
      save_checkpoint(o.export_init, weights);
    }
    dist::barrier();
    return result;
  }
  model->to(device);
  manual_seed(o.seed + 1 + static_cast<uint64_t>(rank));  // each rank its own dropout masks

  // Rank r's columns of the global batch; evaluation runs on every column, on every rank.
  const int64_t B = f.batch_size;
  const Tensor train_data = batchify(corpus.tokens(Part::kTrain), B * world, B * rank, B, device);
  auto eval_data = [&](Part part) {
    LOCKSTEP_CHECK(static_cast<int64_t>(corpus.tokens(part).size()) >= 2 * o.eval_batch_size, "train_word_lm: the ",
                   part == Part::kValid ? "valid" : "test", " part has ", corpus.tokens(part).size(),
                   " tokens, fewer than 2 rows of --eval-batch-size ", o.eval_batch_size, " (use a longer text)");
    return batchify(corpus.tokens(part), o.eval_batch_size, 0, o.eval_batch_size, device);
  };
  Tensor val_data, test_data;
  if (o.eval) val_data = eval_data(Part::kValid), test_data = eval_data(Part::kTest);

  dist::DDPOptions ddp_options;
  if (device.is_cuda()) ddp_options.device_ids = {device.index};
  dist::DistributedDataParallel ddp(model.ptr(), ddp_options);
  const std::vector<Tensor> params = model->parameters();
  const int64_t batches_per_epoch = (train_data.size(0) - 1 + o.bptt - 1) / o.bptt;
  std::unique_ptr<MetricsLog> log;
  if (rank == 0) log = std::make_unique<MetricsLog>(f.metrics, f.plot, "word_lm " + config.rnn_type, false);
  if (talk)
    std::printf("word_lm: %d rank(s), backend %s, device %s, %s %ld-%ld x %ld, vocab %ld, %zu train / %zu valid / "
                "%zu test tokens, %ld batches of %ld x %ld per epoch and rank\n", world,
                dist::get_backend().c_str(), device.str().c_str(), config.rnn_type.c_str(), long(config.ninp),
                long(config.nhid), long(config.nlayers), long(config.ntoken), corpus.tokens(Part::kTrain).size(),
                corpus.tokens(Part::kValid).size(), corpus.tokens(Part::kTest).size(), long(batches_per_epoch),
                long(o.bptt), long(B));

  // main.py's evaluate: the mean loss per token over the whole set, the state carried from chunk to chunk.
  auto evaluate = [&](const Tensor& source) {
    NoGradGuard no_grad;
    model->eval();
    Hidden hidden = model->init_hidden(o.eval_batch_size);
    double total = 0;
    for (int64_t i = 0; i < source.size(0) - 1; i += o.bptt) {
      auto [data, targets] = get_batch(source, i, o.bptt);
      auto [output, next] = model(data, hidden);
      hidden = next;
      total += static_cast<double>(data.size(0)) * nn::functional::nll_loss(output, targets).item<double>();
    }
    model->train();
    return total / static_cast<double>(source.size(0) - 1);
  };

  double lr = f.lr, best_val = INFINITY;
  nn::NamedTensors best;  // main.py's torch.save(model) of the best epoch, kept in memory
  std::vector<double> step_ms, step_cpu_ms;
  int64_t step = 0;
  const int64_t max_steps = f.steps < 0 ? INT64_MAX : f.steps;
  for (int epoch = 1; epoch <= f.epochs && step < max_steps; ++epoch) {
    model->train();
    Hidden hidden = model->init_hidden(B);
    double window_loss = 0;
    auto window_start = Clock::now();
    for (int64_t batch = 0, i = 0; i < train_data.size(0) - 1 && step < max_steps; ++batch, i += o.bptt, ++step) {
      auto t0 = Clock::now();
      const double c0 = cpu_seconds();
      auto [data, targets] = get_batch(train_data, i, o.bptt);
      model->zero_grad();
      hidden = hidden.detach();  // repackage_hidden
      auto [output, next] = ddp.forward<RNNModelImpl>(data, hidden);
      hidden = next;
      Tensor loss = nn::functional::nll_loss(output, targets);
      loss.backward();
      nn::utils::clip_grad_norm_(params, o.clip);
      {
        NoGradGuard no_grad;
        for (const Tensor& p : params) p.add_(p.grad(), -lr);
      }
      const double local = loss.item<double>();
      step_ms.push_back(seconds_since(t0) * 1e3);
      step_cpu_ms.push_back((cpu_seconds() - c0) * 1e3);
      const double mean = world > 1 ? all_reduce_mean(local, device) : local;
      LOCKSTEP_CHECK(std::isfinite(mean), "train_word_lm: loss is ", mean, " at step ", step, " (diverged)");
      result.losses.push_back(mean);
      window_loss += mean;
      if (batch % o.log_interval == 0 && batch > 0) {
        const double cur = window_loss / o.log_interval;
        const double ms = seconds_since(window_start) * 1e3 / o.log_interval;
        if (talk)
          std::printf("| epoch %3d | %5ld/%5ld batches | lr %05.2f | ms/batch %5.2f | loss %5.2f | ppl %8.2f\n", epoch,
                      long(batch), long(train_data.size(0) / o.bptt), lr, ms, cur, std::exp(cur)), std::fflush(stdout);
        if (log) log->log({{"step", double(step)}, {"train_ppl", std::exp(cur)}, {"lr", lr}});
        window_loss = 0;
        window_start = Clock::now();
      }
    }
    if (!o.eval) continue;
    const double val = evaluate(val_data);
    result.val_losses.emplace_back(epoch, val);
    if (talk)
      std::printf("| end of epoch %3d | valid loss %5.2f | valid ppl %8.2f\n", epoch, val, std::exp(val)),
          std::fflush(stdout);
    if (log) log->log({{"step", double(step)}, {"val_ppl", std::exp(val)}, {"lr", lr}});
    if (val < best_val) {
      best_val = val;
      best.clear();
      for (auto& [name, t] : model->state_dict()) best.emplace_back(name, t.clone());
    } else {
      lr /= 4.0;  // anneal when the validation loss does not improve
    }
  }
  if (!best.empty()) {
    model->load_state_dict(best);
    result.test_loss = evaluate(test_data);
    if (talk) std::printf("| end of training | test loss %5.2f | test ppl %8.2f\n", result.test_loss,
                          std::exp(result.test_loss));
    if (log) log->log({{"step", double(step)}, {"test_ppl", std::exp(result.test_loss)}});
  }
  result.step_ms = median_after_warmup(step_ms);
  result.step_cpu_ms = median_after_warmup(step_cpu_ms);
  if (talk && !step_ms.empty())
    std::printf("step_ms %.3f cpu_ms %.3f\n", result.step_ms, result.step_cpu_ms);
  if (rank == 0 && !f.save.empty() && !best.empty()) {
    Checkpoint weights;
    weights.model = model.get();
    save_checkpoint(f.save, weights);
  }
  std::fflush(stdout);
  return result;
}

}  // namespace lockstep::examples
