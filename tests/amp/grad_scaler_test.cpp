// amp::GradScaler against torch.amp.GradScaler: the skip / backoff / growth sequence PyTorch printed
// (tests/fixtures/grad_scaler.safetensors, written by tools/fixtures/make_grad_scaler_fixture.py, which
// states the setup), unscale_ then clipping, the errors PyTorch raises, state_dict, and a disabled
// scaler.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "amp/grad_scaler.h"
#include "autograd/api.h"
#include "nn/utils/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/safetensors.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;
using lockstep::testing::contains;

namespace {

constexpr const char* kFixture = "tests/fixtures/grad_scaler.safetensors";

Tensor fx(const std::string& key) {
  static const std::map<std::string, Tensor> all = [] {
    SafetensorsFile f = load_safetensors(kFixture);
    return std::map<std::string, Tensor>(f.tensors.begin(), f.tensors.end());
  }();
  auto it = all.find(key);
  REQUIRE_MESSAGE(it != all.end(), "fixture ", key, " missing: run tools/fixtures/make_grad_scaler_fixture.py");
  return it->second;
}

amp::GradScalerOptions fixture_options() {
  amp::GradScalerOptions o;
  o.init_scale = 1024;
  o.growth_factor = 2;
  o.backoff_factor = 0.5;
  o.growth_interval = 3;
  return o;
}

// (p * w).sum() with w = [bad, 1] at the fixture's bad steps, [1, 1] otherwise.
Tensor loss_at(const Tensor& p, int step) {
  const float bad = step == 5 ? INFINITY : (step == 2 || step == 6) ? NAN : 1.0f;
  return (p * tensor({bad, 1.0f}, {2})).sum();
}

}  // namespace

TEST_CASE("the skip / backoff / growth sequence equals torch.amp.GradScaler's") {
  Tensor p = tensor({1.0f, 2.0f}, {2}).requires_grad_(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(fixture_options());
  CHECK(scaler.get_scale() == 1024.0);
  const auto scales = fx("scale").to_vector<double>();
  const auto trackers = fx("growth_tracker").to_vector<int64_t>();
  const Tensor params = fx("param");
  const std::vector<bool> stepped = {true, true, false, true, true, false, false, true, true, true, true, true};
  for (int i = 0; i < static_cast<int>(scales.size()); ++i) {
    CAPTURE(i);
    opt.zero_grad();
    scaler.scale(loss_at(p, i)).backward();
    if (i == 4) {
      scaler.unscale_(opt);
      // The unscaled gradient is [1, 1]: its norm sqrt(2) clipped to 1.
      CHECK(p.grad().to_vector<float>() == std::vector<float>{1.0f, 1.0f});
      nn::utils::clip_grad_norm_({p}, 1.0);
    }
    CHECK(scaler.step(opt) == stepped[i]);
    scaler.update();
    CHECK(scaler.get_scale() == scales[i]);
    CHECK(scaler.state_dict()[4].second.item<int64_t>() == trackers[i]);
    CHECK(p.to_vector<float>() == internal::select(params, 0, i).to_vector<float>());
  }
}

TEST_CASE("unscale_ divides the gradients by the scale; twice, or after step, is an error as in PyTorch") {
  Tensor p = tensor({1.0f, 2.0f}, {2}).requires_grad_(true);
  optim::SGD opt({p}, optim::SGDOptions(1.0));
  amp::GradScaler scaler;  // init_scale 2^16
  CHECK(contains(error_of([&] { scaler.unscale_(opt); }), "call scaler.scale(loss)"));
  Tensor scaled = scaler.scale((p * tensor({3.0f, -0.5f}, {2})).sum());
  CHECK(scaled.item<float>() == 2.0f * 65536.0f);
  scaled.backward();
  CHECK(p.grad().to_vector<float>() == std::vector<float>{3.0f * 65536, -0.5f * 65536});
  scaler.unscale_(opt);
  CHECK(p.grad().to_vector<float>() == std::vector<float>{3.0f, -0.5f});
  CHECK(contains(error_of([&] { scaler.unscale_(opt); }), "unscale_() has already been called on this SGD"));
  CHECK(scaler.step(opt));  // uses the unscaled gradients, not unscaling again
  CHECK(p.to_vector<float>() == std::vector<float>{-2.0f, 2.5f});
  CHECK(contains(error_of([&] { scaler.unscale_(opt); }), "unscale_() is being called after step()"));
  CHECK(contains(error_of([&] { scaler.step(opt); }), "step() has already been called since the last update()"));
  scaler.update();
  CHECK(scaler.get_scale() == 65536.0);  // one clean step of 2000
  CHECK(contains(error_of([&] { scaler.update(); }), "no inf checks were recorded"));
  // float16 gradients are refused, as PyTorch's "Attempting to unscale FP16 gradients."
  Tensor h = tensor({1.0f}, {1}).to(kFloat16).requires_grad_(true);
  optim::SGD opt16({h}, optim::SGDOptions(1.0));
  h.autograd_meta().grad = ones({1}, {kFloat16});
  scaler.scale(tensor({1.0f}, {1}));
  CHECK(contains(error_of([&] { scaler.unscale_(opt16); }), "attempting to unscale float16 gradients"));
}

TEST_CASE("update(new_scale), state_dict round trip, bad options, and a disabled scaler") {
  amp::GradScaler a(fixture_options());
  Tensor p = tensor({1.0f}, {1}).requires_grad_(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    a.scale(p.sum()).backward();
    a.step(opt);
    a.update();
  }
  a.update(100.0);
  CHECK(a.get_scale() == 100.0);
  amp::GradScaler b;
  b.load_state_dict(a.state_dict());
  CHECK(b.get_scale() == 100.0);
  CHECK(b.get_growth_interval() == 3);
  CHECK(b.state_dict()[4].first == "_growth_tracker");
  CHECK(b.state_dict()[4].second.item<int64_t>() == 2);
  CHECK(contains(error_of([&] { b.load_state_dict({}); }), "the source state dict is empty"));
  CHECK(contains(error_of([] { amp::GradScaler({.growth_factor = 0.5}); }), "growth_factor must be > 1, got 0.5"));
  CHECK(contains(error_of([] { amp::GradScaler({.backoff_factor = 1.5}); }), "backoff_factor must be in (0, 1)"));
  CHECK(contains(error_of([] { amp::GradScaler({.growth_interval = 0}); }), "growth_interval must be positive"));
  CHECK(contains(error_of([] { amp::GradScaler({.init_scale = -1}); }), "init_scale must be positive"));

  amp::GradScaler off({.enabled = false});
  CHECK(!off.is_enabled());
  Tensor loss = p.sum();
  CHECK(off.scale(loss).data_ptr() == loss.data_ptr());
  CHECK(off.get_scale() == 1.0);
  opt.zero_grad();
  loss.backward();
  off.unscale_(opt);  // nothing to do
  CHECK(off.step(opt));
  off.update();
  CHECK(off.state_dict().empty());
}

TEST_CASE("found_inf_reduction sees the flag: 1 after an inf, 0 otherwise") {
  std::vector<float> seen;
  amp::GradScaler scaler({.found_inf_reduction = [&](Tensor& f) { seen.push_back(f.item<float>()); }});
  Tensor p = tensor({1.0f}, {1}).requires_grad_(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  for (float w : {1.0f, INFINITY}) {
    opt.zero_grad();
    scaler.scale((p * tensor({w}, {1})).sum()).backward();
    scaler.step(opt);
    scaler.update();
  }
  CHECK(seen == std::vector<float>{0.0f, 1.0f});
}
