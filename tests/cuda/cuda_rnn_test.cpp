// Recurrent layers on the GPU: a 2-layer bidirectional LSTM and GRU, forward and backward on cuda:0,
// equal the CPU's (outputs, final states, and the gradients of the input, the initial state and every
// parameter), and so do the fused layer ops they run (lstm_layer, gru_layer) in float64. Without a
// visible device every case skips. In bfloat16 and float16 (the fused layer ops, and the layers and
// cells under autocast, which keep no float32 tensor) against the CPU in float64.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "nn/api.h"
#include "tensor/cuda/cuda.h"
#include "tensor/memory_stats.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/util/half_match.h"

using namespace lockstep;

namespace {

void check_same(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  INFO(what);
  REQUIRE(gpu.defined());
  CHECK(gpu.device() == Device::cuda(0));
  CHECK(internal::allclose(gpu.to(Device::cpu()), cpu, 1e-4, 1e-5));
}

}  // namespace

TEST_CASE("LSTM forward and backward on the GPU equal the CPU's") {
  REQUIRE_DEVICE();
  const Device dev = Device::cuda(0);
  manual_seed(0);
  auto opts = nn::LSTMOptions(6, 8).num_layers(2).bidirectional(true).batch_first(true);
  nn::LSTM cpu(opts), gpu(opts);
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(dev);
  Tensor x = randn({3, 5, 6}), h0 = randn({4, 3, 8}), c0 = randn({4, 3, 8}), g = randn({3, 5, 16});
  Tensor xc = x.clone().set_requires_grad(), hc = h0.clone().set_requires_grad();
  Tensor xg = x.to(dev).set_requires_grad(), hg = h0.to(dev).set_requires_grad();
  auto [out_c, st_c] = cpu(xc, std::make_tuple(hc, c0));
  auto [out_g, st_g] = gpu(xg, std::make_tuple(hg, c0.to(dev)));
  check_same(out_g, out_c, "output");
  check_same(std::get<0>(st_g), std::get<0>(st_c), "h_n");
  check_same(std::get<1>(st_g), std::get<1>(st_c), "c_n");
  (sum(out_c * g) + sum(std::get<1>(st_c))).backward();
  (sum(out_g * g.to(dev)) + sum(std::get<1>(st_g))).backward();
  check_same(xg.grad(), xc.grad(), "x.grad");
  check_same(hg.grad(), hc.grad(), "h0.grad");
  auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
  for (size_t i = 0; i < pc.size(); ++i) check_same(pg[i].second.grad(), pc[i].second.grad(), pc[i].first + ".grad");
}

TEST_CASE("GRU forward and backward on the GPU equal the CPU's") {
  REQUIRE_DEVICE();
  const Device dev = Device::cuda(0);
  manual_seed(1);
  auto opts = nn::GRUOptions(6, 8).num_layers(2).bidirectional(true);
  nn::GRU cpu(opts), gpu(opts);
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(dev);
  Tensor x = randn({5, 3, 6});
  Tensor xc = x.clone().set_requires_grad(), xg = x.to(dev).set_requires_grad();
  auto [out_c, h_c] = cpu(xc);
  auto [out_g, h_g] = gpu(xg);
  check_same(out_g, out_c, "output");
  check_same(h_g, h_c, "h_n");
  (sum(out_c) + sum(h_c)).backward();
  (sum(out_g) + sum(h_g)).backward();
  check_same(xg.grad(), xc.grad(), "x.grad");
  auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
  for (size_t i = 0; i < pc.size(); ++i) check_same(pg[i].second.grad(), pc[i].second.grad(), pc[i].first + ".grad");
}

TEST_CASE("the fused layer ops in float64 on the GPU equal the CPU's, both directions, every gradient") {
  REQUIRE_DEVICE();
  const Device dev = Device::cuda(0);
  manual_seed(2);
  for (bool reverse : {false, true}) {
    INFO("reverse ", reverse);
    std::vector<Tensor> cpu{randn({4, 3, 20}, kFloat64), randn({3, 5}, kFloat64), randn({3, 5}, kFloat64),
                            randn({20, 5}, kFloat64)};
    std::vector<Tensor> gpu;
    for (Tensor& t : cpu) {
      gpu.push_back(t.to(dev).set_requires_grad());
      t.set_requires_grad();
    }
    Tensor out_c = lstm_layer(cpu[0], cpu[1], cpu[2], cpu[3], reverse);
    Tensor out_g = lstm_layer(gpu[0], gpu[1], gpu[2], gpu[3], reverse);
    check_same(out_g, out_c, "lstm_layer");
    Tensor w = randn(out_c.shape(), kFloat64);
    sum(out_c * w).backward();
    sum(out_g * w.to(dev)).backward();
    for (size_t i = 0; i < cpu.size(); ++i)
      check_same(gpu[i].grad(), cpu[i].grad(), "lstm_layer grad " + std::to_string(i));

    std::vector<Tensor> gc{randn({4, 3, 15}, kFloat64), randn({3, 5}, kFloat64), randn({15, 5}, kFloat64),
                           randn({15}, kFloat64)};
    std::vector<Tensor> gg;
    for (Tensor& t : gc) {
      gg.push_back(t.to(dev).set_requires_grad());
      t.set_requires_grad();
    }
    Tensor hc = gru_layer(gc[0], gc[1], gc[2], gc[3], reverse), hg = gru_layer(gg[0], gg[1], gg[2], gg[3], reverse);
    check_same(hg, hc, "gru_layer");
    Tensor v = randn(hc.shape(), kFloat64);
    sum(hc * v).backward();
    sum(hg * v.to(dev)).backward();
    for (size_t i = 0; i < gc.size(); ++i)
      check_same(gg[i].grad(), gc[i].grad(), "gru_layer grad " + std::to_string(i));
  }
}

using testing::check_half;
using testing::half_values;
using testing::kHalves;

TEST_CASE("the fused layer ops in bfloat16 and float16 on the GPU: 16-bit states, float32 math, near float64") {
  REQUIRE_DEVICE();
  manual_seed(5);
  const int64_t T = 6, B = 3, H = 5;
  for (Dtype dt : kHalves) {
    for (bool reverse : {false, true}) {
      INFO("reverse ", reverse);
      testing::check_half_op([&](const auto& v) { return lstm_layer(v[0], v[1], v[2], v[3], reverse); },
                             {{T, B, 4 * H}, {B, H}, {B, H}, {4 * H, H}}, {1, 1, 1, 0.5}, dt, 4, "lstm_layer",
                             Device::cuda(0));
      testing::check_half_op([&](const auto& v) { return gru_layer(v[0], v[1], v[2], v[3], reverse); },
                             {{T, B, 3 * H}, {B, H}, {3 * H, H}, {3 * H}}, {1, 1, 0.5, 1}, dt, 4, "gru_layer",
                             Device::cuda(0));
    }
  }
}

TEST_CASE("LSTM and GRU under autocast on the GPU run in the autocast dtype, states included, near float64") {
  REQUIRE_DEVICE();
  const Device dev = Device::cuda(0);
  for (Dtype dt : kHalves) {
    for (bool lstm : {true, false}) {
      INFO(std::string(lstm ? "LSTM " : "GRU "), dtype_name(dt));
      manual_seed(6);
      nn::LSTM lstm_gpu(nn::LSTMOptions(4, 6).num_layers(2)), lstm_ref(nn::LSTMOptions(4, 6).num_layers(2));
      nn::GRU gru_gpu(nn::GRUOptions(4, 6).num_layers(2)), gru_ref(nn::GRUOptions(4, 6).num_layers(2));
      nn::Module& gpu = lstm ? static_cast<nn::Module&>(*lstm_gpu) : *gru_gpu;
      nn::Module& ref = lstm ? static_cast<nn::Module&>(*lstm_ref) : *gru_ref;
      // The reference: float64 on the CPU from the parameters autocast casts to dt (rounded once).
      ref.to(kFloat64);
      {
        NoGradGuard no_grad;
        auto pg = gpu.parameters(), pr = ref.parameters();
        for (size_t i = 0; i < pg.size(); ++i) internal::copy_(pr[i], internal::to_dtype(pg[i], dt));
      }
      gpu.to(dev);
      // (output, h_n, c_n) of the layer under test; c_n undefined for GRU.
      auto run = [&](nn::LSTM& l, nn::GRU& g, const Tensor& input) -> std::tuple<Tensor, Tensor, Tensor> {
        if (!lstm) return std::tuple_cat(g(input), std::make_tuple(Tensor()));
        auto [out, st] = l(input);
        return {out, std::get<0>(st), std::get<1>(st)};
      };
      Tensor x = half_values({5, 3, 4}, dt), xg = internal::to_device(internal::to_dtype(x, kFloat32), dev);
      Tensor out_g, h_g, c_g;
      {
        autocast guard(kCUDA, dt);
        std::tie(out_g, h_g, c_g) = run(lstm_gpu, gru_gpu, xg);
      }
      auto [out_r, h_r, c_r] = run(lstm_ref, gru_ref, x);
      check_half(out_g, out_r, dt, 4, "output", dev);
      check_half(h_g, h_r, dt, 4, "h_n", dev);
      if (lstm) check_half(c_g, c_r, dt, 4, "c_n", dev);
      // Outside the region, as PyTorch recommends: the gradients reach the float32 parameters.
      Tensor w = half_values(out_r.shape(), dt);
      sum(out_r * w).backward();
      sum(out_g * internal::to_device(internal::to_dtype(w, dt), dev)).backward();
      auto pg = gpu.named_parameters(), pr = ref.named_parameters();
      for (size_t i = 0; i < pg.size(); ++i) {
        INFO(pg[i].first);
        CHECK(pg[i].second.dtype() == kFloat32);
        REQUIRE(pg[i].second.grad().defined());
        CHECK(pg[i].second.grad().dtype() == kFloat32);
        // A float32 gradient of 16-bit math: compare as dt would hold it.
        check_half(internal::to_dtype(pg[i].second.grad(), dt), pr[i].second.grad(), dt, 8, pg[i].first + ".grad",
                   dev);
      }
    }
  }
}

TEST_CASE("the cells under autocast on the GPU run in the autocast dtype, states included, near float64") {
  REQUIRE_DEVICE();
  const Device dev = Device::cuda(0);
  auto gpu32 = [&](const Tensor& t) { return internal::to_device(internal::to_dtype(t, kFloat32), dev); };
  for (Dtype dt : kHalves) {
    manual_seed(11);
    nn::LSTMCell lc(4, 6), lr(4, 6);
    nn::GRUCell gc(4, 6), gr(4, 6);
    nn::RNNCell rc(4, 6), rr(4, 6);
    // The references: float64 on the CPU from the parameters autocast casts to dt (CUDA's lists lower
    // lstm_cell, gru_cell and rnn_tanh_cell with their states).
    for (auto [m, r] : {std::pair<nn::Module*, nn::Module*>{&*lc, &*lr}, {&*gc, &*gr}, {&*rc, &*rr}}) {
      r->to(kFloat64);
      NoGradGuard no_grad;
      auto pm = m->parameters(), pr = r->parameters();
      for (size_t i = 0; i < pm.size(); ++i) internal::copy_(pr[i], internal::to_dtype(pm[i], dt));
      m->to(dev);
    }
    Tensor x = half_values({3, 4}, dt), h = half_values({3, 6}, dt), c = half_values({3, 6}, dt);
    Tensor lh, lcs, gh, rh;
    {
      autocast guard(kCUDA, dt);
      std::tie(lh, lcs) = lc(gpu32(x), std::make_tuple(gpu32(h), gpu32(c)));
      gh = gc(gpu32(x), gpu32(h));
      rh = rc(gpu32(x), gpu32(h));
    }
    auto [lh_r, lc_r] = lr(x, std::make_tuple(h, c));
    check_half(lh, lh_r, dt, 4, "LSTMCell h", dev);
    check_half(lcs, lc_r, dt, 4, "LSTMCell c", dev);
    check_half(gh, gr(x, h), dt, 4, "GRUCell", dev);
    check_half(rh, rr(x, h), dt, 4, "RNNCell", dev);
  }
}

TEST_CASE("an LSTM under autocast on the GPU keeps no float32 tensor: the layer op's states and gates are 16-bit") {
  REQUIRE_DEVICE();
  REQUIRE(memory_stats::enabled());  // LOCKSTEP_MEMORY_STATS=1 (tests/cuda/BUILD)
  auto live = [](const char* label, Dtype dt) { return memory_stats::snapshot().bytes(label, dt); };
  const Device dev = Device::cuda(0);
  for (Dtype dt : kHalves) {
    INFO(dtype_name(dt));
    manual_seed(7);
    nn::LSTM lstm(nn::LSTMOptions(4, 6).num_layers(2));
    lstm->to(dev);
    Tensor x = randn({5, 3, 4}, {kFloat32, dev});
    const size_t f32 = live(nullptr, kFloat32), half = live(nullptr, dt);
    Tensor out;
    {
      autocast guard(kCUDA, dt);
      out = std::get<0>(lstm(x));
    }
    // What the graph holds for backward: the 16-bit casts and the layer op's buffers, nothing in float32.
    CHECK(out.dtype() == dt);
    CHECK(live(nullptr, kFloat32) == f32);
    CHECK(live("lstm_layer", kFloat32) == 0);
    // Each layer's [2, T + 1, B, H] states of 2 bytes (gates and casts besides).
    CHECK(live("lstm_layer", dt) >= 2 * size_t{2 * 6 * 3 * 6 * 2});
    CHECK(live(nullptr, dt) > half);
    sum(out).backward();
    for (const Tensor& p : lstm->parameters()) CHECK(p.grad().dtype() == kFloat32);
  }
}
