// The classifiers' shared training loop (train_loop.h).
#include "examples/common/train_loop.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "autograd/autocast.h"
#include "distributed/api.h"
#include "examples/common/classify.h"
#include "examples/common/metrics_log.h"
#include "nn/loss.h"

namespace lockstep::examples {

using Clock = std::chrono::steady_clock;

ResumePoint resume_classifier(Sharding& sharding, Checkpoint& state, const TrainFlags& f, int64_t steps_per_epoch) {
  // A restarted job (launch --max_restarts) picks up its own last checkpoint.
  std::string resume = f.resume;
  if (resume.empty() && !f.checkpoint.empty() && sharding.has_checkpoint(f.checkpoint)) resume = f.checkpoint;
  if (resume.empty()) return {};
  const int rank = dist::get_rank();
  Checkpoint got = sharding.load(resume, state);
  const std::string spe = got.metadata.count("steps_per_epoch") ? got.metadata.at("steps_per_epoch") : "?";
  LOCKSTEP_CHECK(spe == std::to_string(steps_per_epoch), "", resume, " was written by a run of ", spe,
                 " steps per epoch, this one has ", steps_per_epoch, " (same --batch-size, ranks and data needed)");
  return {got.step + 1, std::stod(got.metadata.at("epoch_loss_sum." + std::to_string(rank))),
          std::stod(got.metadata.at("epoch_seen." + std::to_string(rank)))};
}

void train_classifier(ClassifierRun& run, ResumePoint from) {
  const TrainFlags& f = run.flags;
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const int64_t steps_per_epoch = run.train_loader.size();
  const bool tty = rank == 0 && ::isatty(STDOUT_FILENO);
  const bool bf16 = autocast_bf16(f);
  int64_t step = from.step;
  double epoch_loss = from.epoch_loss, epoch_seen = from.epoch_seen;  // this rank's sums over the epoch so far
  MetricsLog metrics(rank == 0 ? f.metrics : "", rank == 0 ? f.plot : "", run.title, /*append=*/step > 0);
  nn::CrossEntropyLoss criterion;
  double window_loss = 0, window_seen = 0;  // this rank's sums since the last record
  auto window_t0 = Clock::now();
  run.model.train();
  while (step < run.total_steps) {
    const int64_t epoch = step / steps_per_epoch, skip = step % steps_per_epoch;
    run.train_loader.set_epoch(epoch);
    int64_t i = 0;
    for (auto& batch : run.train_loader) {
      if (i++ < skip) continue;  // done before the checkpoint this run resumed from
      if (run.reseed_each_step) manual_seed(run.seed * 1000003 + uint64_t(step) * 64 + uint64_t(rank));
      const double lr = run.opt.lr(0);
      run.sharding.zero_grad();
      Tensor loss;
      {
        autocast guard(run.device.type, kBFloat16, bf16);  // --dtype bfloat16: forward and loss, as torch.autocast
        loss = criterion(run.sharding.forward(batch.input), batch.target);
      }
      loss.backward();
      run.sharding.step();
      if (run.scheduler) run.scheduler->step();
      const double l = loss.item<double>();
      LOCKSTEP_CHECK(std::isfinite(l), "loss is ", l, " at step ", step, " on rank ", rank);
      const double n = double(batch.input.size(0));
      window_loss += l * n, window_seen += n, epoch_loss += l * n, epoch_seen += n;
      ++step;
      const bool epoch_end = step % steps_per_epoch == 0, last = step == run.total_steps;
      if (tty && (step % 10 == 0 || epoch_end))
        std::printf("\repoch %ld [%-30s] %ld/%ld", long(epoch), std::string(30 * i / steps_per_epoch, '=').c_str(),
                    long(i), long(steps_per_epoch)), std::fflush(stdout);
      if (step % run.log_every && !epoch_end && !last) continue;

      // A record: the global loss since the last one; at epoch ends the test accuracy too.
      const double secs = std::chrono::duration<double>(Clock::now() - window_t0).count();
      auto sums = all_reduce_sum({window_loss, window_seen, epoch_loss, epoch_seen}, run.device);
      MetricsLog::Fields rec{{"step", double(step)}, {"epoch", double(epoch)},
                             {"loss", sums[0] / sums[1]}, {"lr", lr}, {"samples_per_s", sums[1] / secs}};
      if (epoch_end) {
        double acc;
        {
          autocast guard(run.device.type, kBFloat16, bf16);
          acc = evaluate_accuracy(run.model, run.test_loader, run.test_size, run.device);
        }
        rec.insert(rec.begin() + 3, {"test_acc", acc});
        if (rank == 0) {
          if (tty) std::printf("\r%*s\r", 60, "");
          std::printf("epoch %ld loss %.4f test_acc %.4f samples_per_s %.0f lr %.6f\n", long(epoch),
                      sums[2] / sums[3], acc, sums[1] / secs, lr);
        }
        epoch_loss = epoch_seen = 0;
      }
      if (rank == 0) {
        if (!epoch_end && !tty) std::printf("step %ld loss %.9g lr %.6g\n", long(step), sums[0] / sums[1], lr);
        std::fflush(stdout);
        metrics.log(rec);
      }
      if (!f.checkpoint.empty()) {
        // Every rank's partial epoch sums, so a resumed run's epoch loss is the uninterrupted one's.
        std::vector<double> ep(2 * world, 0.0);
        ep[2 * rank] = epoch_loss, ep[2 * rank + 1] = epoch_seen;
        ep = all_reduce_sum(ep, run.device);
        run.state.step = step - 1;
        run.state.epoch = epoch_end ? epoch : epoch - 1;
        run.state.metadata = {{"steps_per_epoch", std::to_string(steps_per_epoch)}};
        for (int r = 0; r < world; ++r) {
          run.state.metadata["epoch_loss_sum." + std::to_string(r)] = detail::str_cat(ep[2 * r]);
          run.state.metadata["epoch_seen." + std::to_string(r)] = detail::str_cat(ep[2 * r + 1]);
        }
        run.sharding.save(f.checkpoint, run.state);  // every rank (rank 0 writes, or each its shard)
      }
      window_loss = window_seen = 0;
      window_t0 = Clock::now();
      if (last) break;
    }
  }
  if (!f.save.empty()) run.sharding.save_weights(f.save, step - 1);
}

}  // namespace lockstep::examples
