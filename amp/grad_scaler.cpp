// GradScaler: scaling, unscaling with the inf/NaN check, the step rule and the scale's update.
#include "amp/grad_scaler.h"

#include <cmath>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "common/check.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::amp {

namespace {

void check_factors(double growth, double backoff, int64_t interval) {
  LOCKSTEP_CHECK(growth > 1.0, "GradScaler: growth_factor must be > 1, got ", growth);
  LOCKSTEP_CHECK(backoff < 1.0 && backoff > 0.0, "GradScaler: backoff_factor must be in (0, 1), got ", backoff);
  LOCKSTEP_CHECK(interval > 0, "GradScaler: growth_interval must be positive, got ", interval);
}

// 1 (float32 [1]) when g holds an inf or NaN, else 0: g * 0 is NaN exactly there, and so is its sum.
// On g's device, without reading it back.
Tensor non_finite(const Tensor& g) {
  Tensor s = internal::to_dtype(internal::sum(internal::mul(g, 0.0)), kFloat32);
  return internal::view(internal::to_dtype(internal::binary(BinaryOp::Ne, s, s), kFloat32), {1});
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.init_scale > 0 && std::isfinite(static_cast<float>(options_.init_scale)),
                 "GradScaler: init_scale must be positive and finite in float32, got ", options_.init_scale);
  check_factors(options_.growth_factor, options_.backoff_factor, options_.growth_interval);
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!options_.enabled) return outputs;
  LOCKSTEP_CHECK(outputs.defined(), "GradScaler.scale: got an undefined tensor");
  LOCKSTEP_CHECK(is_floating_point(outputs.dtype()), "GradScaler.scale: expected a floating-point tensor (the loss), "
                 "got ", outputs.dtype());
  if (!scale_) scale_ = static_cast<float>(options_.init_scale);
  return outputs * static_cast<double>(*scale_);  // through autograd: backward carries the scale
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  LOCKSTEP_CHECK(scale_, "GradScaler.unscale_: no scale yet; call scaler.scale(loss) earlier in the iteration");
  PerOptimizer& st = per_optimizer_[&optimizer];
  LOCKSTEP_CHECK(st.stage != Stage::kUnscaled, "GradScaler.unscale_: unscale_() has already been called on this ",
                 optimizer.name(), " optimizer since the last update()");
  LOCKSTEP_CHECK(st.stage != Stage::kStepped, "GradScaler.unscale_: unscale_() is being called after step()");
  NoGradGuard no_grad;
  // PyTorch's inverse: computed in float64, rounded to float32.
  const double inv_scale = static_cast<float>(1.0 / static_cast<double>(*scale_));
  Tensor found;
  for (const Tensor& p : optimizer.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    LOCKSTEP_CHECK(g.dtype() != kFloat16, "GradScaler.unscale_: attempting to unscale float16 gradients (of a ",
                   p.shape(), " parameter); keep the parameters in float32 and compute in float16");
    internal::mul_(g, inv_scale);
    Tensor bad = non_finite(g);
    if (!found.defined()) {
      found = bad;
    } else {
      found = internal::maximum(found, internal::to_device(bad, found.device()));
    }
  }
  if (!found.defined()) found = zeros({1});  // no gradients: nothing is inf
  if (options_.found_inf_reduction) options_.found_inf_reduction(found);
  st.found_inf = found;
  st.stage = Stage::kUnscaled;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  PerOptimizer& st = per_optimizer_[&optimizer];
  LOCKSTEP_CHECK(st.stage != Stage::kStepped, "GradScaler.step: step() has already been called since the last "
                 "update()");
  if (st.stage == Stage::kReady) unscale_(optimizer);
  PerOptimizer& done = per_optimizer_[&optimizer];
  const bool skip = done.found_inf.item<float>() != 0.0f;
  if (!skip) optimizer.step();
  done.stage = Stage::kStepped;
  return !skip;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  LOCKSTEP_CHECK(scale_, "GradScaler.update: no scale yet; call scaler.scale(loss) earlier in the iteration");
  if (new_scale) {
    LOCKSTEP_CHECK(*new_scale > 0, "GradScaler.update: new_scale must be positive, got ", *new_scale);
    scale_ = static_cast<float>(*new_scale);
  } else {
    bool found_inf = false, any = false;
    for (auto& [_, st] : per_optimizer_) {
      if (!st.found_inf.defined()) continue;
      any = true;
      found_inf = found_inf || st.found_inf.item<float>() != 0.0f;
    }
    LOCKSTEP_CHECK(any, "GradScaler.update: no inf checks were recorded prior to update() (call unscale_ or step "
                   "first)");
    // _amp_update_scale_'s rule, in float32 as its kernel computes.
    if (found_inf) {
      scale_ = *scale_ * static_cast<float>(options_.backoff_factor);
      growth_tracker_ = 0;
    } else if (growth_tracker_ + 1 == options_.growth_interval) {
      const float grown = *scale_ * static_cast<float>(options_.growth_factor);
      if (std::isfinite(grown)) scale_ = grown;
      growth_tracker_ = 0;
    } else {
      ++growth_tracker_;
    }
  }
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_ ? static_cast<double>(*scale_) : options_.init_scale;
}

void GradScaler::set_growth_factor(double f) {
  check_factors(f, options_.backoff_factor, options_.growth_interval);
  options_.growth_factor = f;
}

void GradScaler::set_backoff_factor(double f) {
  check_factors(options_.growth_factor, f, options_.growth_interval);
  options_.backoff_factor = f;
}

void GradScaler::set_growth_interval(int64_t n) {
  check_factors(options_.growth_factor, options_.backoff_factor, n);
  options_.growth_interval = n;
}

optim::StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  auto f64 = [](double v) { return full({}, v, {kFloat64}); };
  auto i64 = [](int64_t v) { return tensor(std::vector<int64_t>{v}, Shape{}); };
  return {{"scale", f64(get_scale())},
          {"growth_factor", f64(options_.growth_factor)},
          {"backoff_factor", f64(options_.backoff_factor)},
          {"growth_interval", i64(options_.growth_interval)},
          {"_growth_tracker", i64(growth_tracker_)}};
}

void GradScaler::load_state_dict(const optim::StateDict& state) {
  if (!options_.enabled) return;
  LOCKSTEP_CHECK(!state.empty(), "GradScaler.load_state_dict: the source state dict is empty, possibly because it "
                 "was saved from a disabled instance of GradScaler");
  auto get = [&](const char* key) -> double {
    for (const auto& [k, t] : state) {
      if (k != key) continue;
      LOCKSTEP_CHECK(t.defined() && t.numel() == 1, "GradScaler.load_state_dict: '", key, "' must hold one value, got ",
                     t.defined() ? t.shape() : Shape{});
      return internal::to_dtype(t, kFloat64).item<double>();
    }
    fail("GradScaler.load_state_dict: the state dict has no '", key, "'");
  };
  const double scale = get("scale"), growth = get("growth_factor"), backoff = get("backoff_factor");
  const auto interval = static_cast<int64_t>(get("growth_interval"));
  const auto tracker = static_cast<int64_t>(get("_growth_tracker"));
  check_factors(growth, backoff, interval);
  LOCKSTEP_CHECK(scale > 0, "GradScaler.load_state_dict: scale must be positive, got ", scale);
  scale_ = static_cast<float>(scale);
  options_.growth_factor = growth;
  options_.backoff_factor = backoff;
  options_.growth_interval = interval;
  growth_tracker_ = tracker;
}

}  // namespace lockstep::amp
