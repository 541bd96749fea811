// The flags every training example takes (train_eval's set), declared once so that cnn_fashion and gpt
// read the same way on the command line: --epochs/--steps, --batch-size per rank, --lr, --backend,
// --device, --dtype, --init, --save, --checkpoint/--resume, --timeout, --metrics/--plot.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace lockstep::examples {

struct TrainFlags {
  int epochs = 1;
  int64_t steps = -1;       // optimizer steps in all; -1: as many as `epochs` give
  int64_t batch_size = 64;  // per rank, as DataLoader's
  double lr = 1e-3;
  std::string backend = "auto", device = "auto";
  std::string dtype = "float32";  // "bfloat16": forward and loss under autocast, float32 master weights
  std::string init;        // initial weights (safetensors), e.g. to start the PyTorch twin from the same point
  std::string save;        // final weights alone, under PyTorch's names
  std::string checkpoint;  // resumable checkpoint, rewritten as the run goes
  std::string resume;      // start from this checkpoint
  double timeout_s = 0;    // process-group timeout; 0: the default
  std::string metrics;     // JSON lines, one per logged point (rank 0)
  std::string plot;        // SVG of the curves in `metrics` (rank 0)
};

// Registers the flags on `app` with `f`'s current values as defaults (set them before calling).
inline void add_train_flags(CLI::App& app, TrainFlags& f) {
  app.add_option("--epochs", f.epochs, "epochs")->capture_default_str();
  app.add_option("--steps", f.steps, "stop after this many optimizer steps (-1: run every epoch)")
      ->capture_default_str();
  app.add_option("--batch-size", f.batch_size, "batch size per rank")->capture_default_str();
  app.add_option("--lr", f.lr, "peak learning rate")->capture_default_str();
  app.add_option("--backend", f.backend, "gloo, nccl, mpi (under mpirun) or auto")->capture_default_str();
  app.add_option("--device", f.device, "cpu, cuda or auto (cuda:LOCAL_RANK with nccl)")->capture_default_str();
  app.add_option("--dtype", f.dtype, "float32, or bfloat16: forward and loss under autocast (torch.autocast), "
                 "float32 master weights")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  app.add_option("--init", f.init, "load initial weights from this safetensors file");
  app.add_option("--save", f.save, "write the final weights here (safetensors, PyTorch's names)");
  app.add_option("--checkpoint", f.checkpoint, "write a resumable checkpoint here as the run goes");
  app.add_option("--resume", f.resume, "continue from this checkpoint");
  app.add_option("--timeout", f.timeout_s, "process-group timeout in seconds");
  app.add_option("--metrics", f.metrics, "append metrics here as JSON lines (rank 0)");
  app.add_option("--plot", f.plot, "draw the metrics' curves into this SVG file (rank 0)");
}

// Whether --dtype asks for autocast (the guard's `enabled`).
inline bool autocast_bf16(const TrainFlags& f) { return f.dtype == "bfloat16"; }

}  // namespace lockstep::examples
