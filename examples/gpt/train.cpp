// train_gpt: the data-parallel training loop of examples/gpt (see train.h).
#include "examples/gpt/train.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <unordered_set>

#include "distributed/init.h"
#include "examples/common/metrics_log.h"
#include "examples/common/sharding.h"
#include "examples/common/train_device.h"
#include "optim/api.h"
#include "examples/common/step_timing.h"
#include "optim/checkpoint.h"
#include "tensor/memory_stats.h"
#include "tensor/cuda/cuda.h"

namespace lockstep::examples {
namespace {

double all_reduce_mean(double v, Device dev) {
  Tensor t = tensor(std::vector<double>{v}, {}, dev);
  dist::all_reduce(t);
  return t.item<double>() / dist::get_world_size();
}

// nanoGPT's get_lr: linear warmup to lr over warmup_iters, cosine decay to min_lr at lr_decay_iters.
double nanogpt_lr(int64_t it, double lr, double min_lr, int64_t warmup, int64_t decay_iters) {
  if (it < warmup) return lr * static_cast<double>(it + 1) / static_cast<double>(warmup + 1);
  if (it > decay_iters) return min_lr;
  const double ratio =
      static_cast<double>(it - warmup) / static_cast<double>(std::max<int64_t>(1, decay_iters - warmup));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

void check_options(const GPTTrainOptions& o) {
  LOCKSTEP_CHECK(o.train.steps > 0, "train_gpt: --steps (max_iters) must be positive, got ", o.train.steps);
  LOCKSTEP_CHECK(o.train.batch_size > 0, "train_gpt: --batch-size must be positive, got ", o.train.batch_size);
  LOCKSTEP_CHECK(o.train.lr > 0 && o.min_lr >= 0 && o.min_lr <= o.train.lr,
                 "train_gpt: need lr > 0 and 0 <= min_lr <= lr, got lr ", o.train.lr, ", min_lr ", o.min_lr);
  LOCKSTEP_CHECK(o.grad_accum > 0, "train_gpt: --grad-accum must be positive, got ", o.grad_accum);
  LOCKSTEP_CHECK(o.warmup_iters >= 0, "train_gpt: --warmup-iters must be >= 0, got ", o.warmup_iters);
  LOCKSTEP_CHECK(o.eval_interval > 0 && o.eval_iters > 0 && o.log_interval > 0,
                 "train_gpt: --eval-interval, --eval-iters and --log-interval must be positive, got ", o.eval_interval,
                 ", ", o.eval_iters, ", ", o.log_interval);
  LOCKSTEP_CHECK(o.grad_clip >= 0 && o.weight_decay >= 0,
                 "train_gpt: --grad-clip and --weight-decay must be >= 0, got ", o.grad_clip, ", ", o.weight_decay);
  LOCKSTEP_CHECK(o.sample_tokens >= 0 && o.top_k >= 0 && (o.sample_tokens == 0 || o.temperature > 0),
                 "train_gpt: need --sample-tokens >= 0, --top-k >= 0 and --temperature > 0, got ", o.sample_tokens,
                 ", ", o.top_k, ", ", o.temperature);
  LOCKSTEP_CHECK(o.shard == "none" || o.shard == "optimizer" || o.shard == "full",
                 "train_gpt: --shard must be none, optimizer or full, got '", o.shard, "'");
}

// This process's peak resident memory (VmHWM), in KiB.
long peak_rss_kib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// The seed of rank `rank`'s dropout masks at `step`: a resumed run draws the masks it would have drawn.
uint64_t step_seed(uint64_t seed, int rank, int64_t step) {
  return window_start(seed, Split::kTrain, step, -1 - rank, INT64_MAX);
}

}  // namespace

GPTTrainResult train_gpt(const GPTTrainOptions& o) {
  check_options(o);
  const TrainFlags& f = o.train;
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device device = examples::training_device(f.device);
  const bool talk = rank == 0 && !o.quiet, tty = talk && ::isatty(STDOUT_FILENO);

  CharText text(o.text.empty() ? read_fortunes() : read_text_file(o.text));
  GPTConfig config = o.model;
  config.vocab_size = text.vocab_size();
  manual_seed(o.seed);
  GPT model(config);
  if (!f.init.empty()) {
    Checkpoint weights;
    weights.model = model.get();
    load_checkpoint(f.init, weights);
  }
  GPTTrainResult result;
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

  // nanoGPT's configure_optimizers: weight decay on the matmul and embedding weights (2-D) only, chosen
  // before sharding flattens them: two param groups over any subset (ZeRO's share, FSDP's shards).
  const double n_params = model->num_params() / 1e6;  // before sharding leaves each rank a part
  std::unordered_set<TensorImpl*> decayed;
  for (const auto& p : model->parameters())
    if (p.dim() >= 2) decayed.insert(p.impl());
  auto groups_of = [&](const std::vector<Tensor>& ps) {
    std::vector<std::vector<Tensor>> g(2);  // decay, no_decay
    for (const auto& p : ps) g[decayed.count(p.impl()) ? 0 : 1].push_back(p);
    return g;
  };
  auto adamw = [&](double wd) { return optim::AdamWOptions(f.lr).betas(o.beta1, o.beta2).weight_decay(wd); };
  auto make_adamw = [&](std::vector<std::vector<Tensor>> g) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(
        std::vector<optim::AdamW::ParamGroup>{{g[0], adamw(o.weight_decay)}, {g[1], adamw(0.0)}});
  };
  // --shard full: every block a unit, then the root; --shard optimizer: each rank's share of AdamW.
  std::vector<std::shared_ptr<nn::Module>> blocks;
  for (const auto& block : *model->transformer->h) blocks.push_back(block);
  Sharding sharding(o.shard, model.ptr(), blocks, groups_of, make_adamw);
  dist::FSDPModule* fsdp_root = sharding.fsdp_root();
  optim::Optimizer& optimizer = sharding.optimizer();
  const int64_t max_iters = f.steps, decay_iters = o.lr_decay_iters < 0 ? max_iters : o.lr_decay_iters;
  optim::LambdaLR scheduler(optimizer, [&](int64_t it) {
    return nanogpt_lr(it, f.lr, o.min_lr, o.warmup_iters, decay_iters) / f.lr;
  });

  // A checkpoint holds the model, AdamW, the scheduler and the step: batches and dropout masks are
  // functions of (seed, rank, step), so the step is the data position. --shard full's is a directory.
  Checkpoint state;
  state.model = model.get();
  state.scheduler = &scheduler;
  std::string resume = f.resume;
  if (resume.empty() && !f.checkpoint.empty() && sharding.has_checkpoint(f.checkpoint)) resume = f.checkpoint;
  int64_t start = 0;
  if (!resume.empty()) start = sharding.load(resume, state).step + 1;
  result.first_step = start;

  dist::DDPOptions ddp_options;
  if (device.is_cuda()) ddp_options.device_ids = {device.index};
  sharding.wrap(ddp_options);
  dist::DistributedDataParallel* ddp = sharding.ddp();
  const int64_t B = f.batch_size, T = config.block_size;
  const double tokens_per_step = static_cast<double>(world * B * o.grad_accum * T);
  std::unique_ptr<MetricsLog> log;
  if (rank == 0) {
    log = std::make_unique<MetricsLog>(f.metrics, f.plot, "gpt", start > 0);
    if (start > 0) log->drop_after(static_cast<double>(start - 1));  // the steps after the checkpoint are redone
  }
  if (talk)
    std::printf("gpt: %d rank(s), backend %s, device %s, %.2fM parameters, vocab %ld, %zu train / %zu val tokens, "
                "%.0f tokens per step%s\n", world, dist::get_backend().c_str(), device.str().c_str(),
                n_params, long(config.vocab_size), text.tokens(Split::kTrain).size(),
                text.tokens(Split::kVal).size(), tokens_per_step,
                start ? (", resuming at step " + std::to_string(start)).c_str() : "");

  // The validation loss over eval_iters batches per rank, averaged over ranks; no collectives inside.
  auto estimate_val_loss = [&](int64_t step) {
    NoGradGuard no_grad;
    model->eval();
    double sum = 0;
    for (int64_t k = 0; k < o.eval_iters; ++k) {
      auto [x, y] = text.get_batch(Split::kVal, o.seed, step, batch_rows(k, rank, world, B), B, T, device);
      autocast guard(device.type, kBFloat16, autocast_bf16(o.train));
      sum += model(x, y).second.item<double>();
    }
    model->train();
    return all_reduce_mean(sum / o.eval_iters, device);
  };

  double window_secs = 0, total_secs = 0;  // training time since the last log line, and in all
  int64_t window_steps = 0;
  std::vector<double> step_ms, step_cpu_ms;
  double fwd_s = 0, bwd_s = 0, opt_s = 0;
  const int64_t stop = o.stop_after >= 0 ? std::min(o.stop_after, max_iters) : max_iters;
  const int64_t ckpt_every = o.checkpoint_interval > 0 ? o.checkpoint_interval : o.eval_interval;
  for (int64_t step = start; step < stop; ++step) {
    const char* restarts = std::getenv("LOCKSTEP_RESTART_COUNT");
    if (step == o.sigkill_at_step && rank == world - 1 && (!restarts || std::string(restarts) == "0")) {
      std::fprintf(stderr, "gpt: rank %d: --sigkill-at-step %ld: killing itself\n", rank, long(step));
      ::kill(::getpid(), SIGKILL);
    }
    double val = NAN;
    if (step % o.eval_interval == 0) val = estimate_val_loss(step);
    const double lr = optimizer.lr(0);
    auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    manual_seed(step_seed(o.seed, rank, step));
    sharding.zero_grad();
    double local = 0;
    for (int64_t m = 0; m < o.grad_accum; ++m) {
      auto [x, y] = text.get_batch(Split::kTrain, o.seed, step, batch_rows(m, rank, world, B), B, T, device);
      auto micro_step = [&] {
        auto tf = Clock::now();
        Tensor loss;
        {
          memory_stats::Scope label("forward");
          autocast guard(device.type, kBFloat16, autocast_bf16(o.train));
          loss = (ddp ? ddp->forward<GPTImpl>(x, y).second : model(x, y).second) * (1.0 / o.grad_accum);
        }
        auto tb = Clock::now();
        fwd_s += std::chrono::duration<double>(tb - tf).count();
        loss.backward();
        bwd_s += seconds_since(tb);
        local += loss.item<double>();
      };
      // All but the last micro-step accumulate locally; the last one's backward reduces the sum.
      const bool sync = m + 1 == o.grad_accum;
      if (fsdp_root) {
        fsdp_root->set_requires_gradient_sync(sync);
        micro_step();
      } else if (!sync) {
        auto no_sync = ddp->no_sync();
        micro_step();
      } else {
        micro_step();
      }
    }
    auto to = Clock::now();
    memory_stats::Scope label("optimizer");
    if (o.grad_clip > 0) sharding.clip_grad_norm_(o.grad_clip);  // under full: the norm over every shard
    sharding.step();
    scheduler.step();
    opt_s += seconds_since(to);
    const double secs = seconds_since(t0);
    const double loss = world > 1 ? all_reduce_mean(local, device) : local;
    LOCKSTEP_CHECK(std::isfinite(loss), "train_gpt: loss is ", loss, " at step ", step, " (diverged)");
    result.losses.push_back(loss);
    if (!std::isnan(val)) result.val_losses.emplace_back(step, val);
    step_ms.push_back(secs * 1e3);
    step_cpu_ms.push_back((cpu_seconds() - c0) * 1e3);
    window_secs += secs, total_secs += secs, ++window_steps;

    const bool last = step + 1 == stop;
    if (rank == 0 && (step % o.log_interval == 0 || !std::isnan(val) || last)) {
      const double tps = tokens_per_step * window_steps / window_secs;
      MetricsLog::Fields fields = {{"step", double(step)}, {"loss", loss}};
      if (!std::isnan(val)) fields.emplace_back("val_loss", val);
      fields.insert(fields.end(), {{"lr", lr}, {"tokens_per_s", tps}});
      log->log(fields);
      if (tty) std::printf("\r%*s\r", 100, "");
      if (talk && (!tty || !std::isnan(val) || last)) {
        std::printf("step %ld loss %.4f", long(step), loss);
        if (!std::isnan(val)) std::printf(" val_loss %.4f", val);
        std::printf(" lr %.3g tokens_per_s %.0f\n", lr, tps);
        std::fflush(stdout);
      }
      window_secs = 0, window_steps = 0;
    }
    if (tty)
      std::printf("\rstep %ld/%ld [%-30s] loss %.4f", long(step + 1), long(max_iters),
                  std::string(30 * (step + 1) / max_iters, '=').c_str(), loss), std::fflush(stdout);
    if (!f.checkpoint.empty() && ((step + 1) % ckpt_every == 0 || last)) {
      state.step = step;
      sharding.save(f.checkpoint, state);  // every rank: ZeRO consolidates, fully_shard writes each rank's shard
    }
  }
  if (tty) std::printf("\r%*s\r", 100, "");
  const int64_t ran = static_cast<int64_t>(result.losses.size());
  if (ran > 0) result.tokens_per_s = tokens_per_step * ran / total_secs;
  if (stop == max_iters && ran > 0) {
    const double val = estimate_val_loss(max_iters);
    result.val_losses.emplace_back(max_iters, val);
    if (rank == 0) log->log({{"step", double(max_iters)}, {"val_loss", val}});
    if (talk) std::printf("step %ld val_loss %.4f\n", long(max_iters), val);
  }
  if (talk && ran > 0) {
    std::printf("time per step: median %.2f ms (CPU %.2f ms); mean forward %.2f ms, backward %.2f ms, "
                "clip+optimizer %.2f ms; tokens_per_s %.0f\n", median_after_warmup(step_ms),
                median_after_warmup(step_cpu_ms), 1e3 * fwd_s / ran, 1e3 * bwd_s / ran, 1e3 * opt_s / ran,
                result.tokens_per_s);
    std::printf("step_ms %.3f cpu_ms %.3f\n", median_after_warmup(step_ms), median_after_warmup(step_cpu_ms));
  }
  // Sharded, every rank generates alike (each forward gathers the blocks); the root is gathered around it.
  if ((rank == 0 || fsdp_root) && stop == max_iters && o.sample_tokens > 0) {
    manual_seed(o.seed);
    if (fsdp_root) fsdp_root->unshard();
    const std::string& chars = text.chars();
    const int64_t newline = chars.find('\n') == std::string::npos ? 0 : static_cast<int64_t>(chars.find('\n'));
    Tensor out = model->generate(tensor(std::vector<int64_t>{newline}, {1, 1}, device), o.sample_tokens,
                                 o.temperature, o.top_k);
    std::vector<int64_t> tokens = out.to(Device::cpu()).to_vector<int64_t>();
    if (fsdp_root) fsdp_root->reshard();
    result.sample = text.decode(std::vector<int64_t>(tokens.begin() + 1, tokens.end()));
    if (talk) std::printf("--- sample (%ld tokens, temperature %g, top_k %ld) ---\n%s\n---\n", long(o.sample_tokens),
                          o.temperature, long(o.top_k), result.sample.c_str());
  }
  if (!f.save.empty() && stop == max_iters) sharding.save_weights(f.save, max_iters - 1);
  if (!o.quiet) {
    std::fflush(stdout);
    std::printf("gpt: rank %d --shard %s VmHWM %ld KiB\n", rank, o.shard.c_str(), peak_rss_kib());
  }
  std::fflush(stdout);
  return result;
}

}  // namespace lockstep::examples
