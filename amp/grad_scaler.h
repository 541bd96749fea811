// GradScaler: loss scaling for float16 / bfloat16 training, as torch.amp.GradScaler. Small gradients
// underflow float16; scaling the loss by S scales every gradient by S, and unscale_ divides them back in
// float32 before the optimizer sees them. A step whose gradients hold an inf or NaN (S was too large) is
// skipped and S multiplied by backoff_factor; after growth_interval clean steps in a row S is
// multiplied by growth_factor. The loop, as PyTorch's:
//
//   amp::GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);               // optional: to clip the true gradients
//   scaler.step(optimizer);                   // skipped when a gradient is inf/NaN
//   scaler.update();
//
// The scale is a float32, updated as PyTorch's _amp_update_scale_ updates its float32 tensor, so the
// sequence of scales is PyTorch's. Under data parallelism every rank must skip the same steps:
// `found_inf_reduction` combines the ranks' flags (dist::found_inf_all_reduce, distributed/found_inf.h).
// A disabled scaler passes everything through: scale returns its input, step steps, update does nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "optim/optimizer.h"
#include "tensor/tensor.h"

namespace lockstep::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  // Combines, in place, this rank's found-inf flag (a float32 [1] tensor on the gradients' device: 1 when
  // any gradient of the optimizer held an inf or NaN, else 0) with the other ranks' by a maximum, so
  // that all skip together. Empty: this process decides alone.
  std::function<void(Tensor& found_inf)> found_inf_reduction = nullptr;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // outputs * scale (outputs itself when disabled), in outputs' dtype and on its device.
  Tensor scale(const Tensor& outputs);
  // Divides every gradient of `optimizer` by the scale, in place, and records whether one was inf or
  // NaN. Once per optimizer between update()s, and before step (as PyTorch: a second call throws).
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ (unless already done), then optimizer.step() unless a gradient was inf/NaN. Returns whether
  // the optimizer stepped (PyTorch returns the step's result).
  bool step(optim::Optimizer& optimizer);
  // The scale for the next iteration: backed off if any optimizer's step saw inf/NaN since the last
  // update, grown after growth_interval clean updates; or `new_scale` when given.
  void update(std::optional<double> new_scale = std::nullopt);

  // The current scale (init_scale before the first scale()); 1 when disabled.
  double get_scale() const;
  double get_growth_factor() const { return options_.growth_factor; }
  void set_growth_factor(double f);
  double get_backoff_factor() const { return options_.backoff_factor; }
  void set_backoff_factor(double f);
  int64_t get_growth_interval() const { return options_.growth_interval; }
  void set_growth_interval(int64_t n);
  bool is_enabled() const { return options_.enabled; }

  // PyTorch's keys: scale, growth_factor, backoff_factor (float64 []), growth_interval, _growth_tracker
  // (int64 []); empty when disabled. load_state_dict of an empty dict throws, as PyTorch's.
  optim::StateDict state_dict() const;
  void load_state_dict(const optim::StateDict& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    Tensor found_inf;  // float32 [1], after unscale_
  };

  GradScalerOptions options_;
  std::optional<float> scale_;  // set by the first scale() (PyTorch's lazily created _scale)
  int64_t growth_tracker_ = 0;  // clean steps in a row since the last change of scale
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace lockstep::amp
