// Recurrent layers and cells in bfloat16 and float16 on the CPU, against float64 from the same 16-bit
// values: the fused layer ops (16-bit gates and states, float32 math in the cell loops, products
// accumulated in float32) and the cells' ops, forward and every gradient; nn::LSTM under
// autocast(kCPU) in bfloat16, states included, keeping no float32 tensor, with float32 gradients for
// the float32 parameters; nn::GRU and the cells under CPU autocast as PyTorch's CPU lists have them;
// and the errors for operands of mixed dtypes.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <tuple>

#include "nn/api.h"
#include "tensor/memory_stats.h"
#include "tests/util/half_match.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using testing::check_half;
using testing::check_half_op;
using testing::error_of;
using testing::half_values;
using testing::kHalves;
namespace F = lockstep::nn::functional;

TEST_CASE("gemm_ in bfloat16 and float16 on the CPU, the layers' step product: out = alpha A B^T + beta out + bias") {
  manual_seed(4);
  for (Dtype dt : kHalves) {
    for (double beta : {0.0, 1.0, 0.5}) {
      INFO(dtype_name(dt), " beta ", beta);
      Tensor a = half_values({3, 40}, dt), b = half_values({24, 40}, dt, 0.2), c = half_values({3, 24}, dt);
      Tensor bias = half_values({24}, dt);
      Tensor out = internal::to_dtype(c, dt);
      internal::gemm_(out, internal::to_dtype(a, dt), false, internal::to_dtype(b, dt), true, 1.5, beta,
                      internal::to_dtype(bias, dt));
      // float32 accumulation; the bias joins beta * out first, one rounding more: within 2 ulps.
      check_half(out, 1.5 * matmul(a, b.t()) + beta * c + bias, dt, 2, "gemm_");
    }
  }
}

TEST_CASE("the fused layer ops in bfloat16 and float16 on the CPU: 16-bit states, float32 math, near float64") {
  manual_seed(5);
  // H = 5 runs the loops' tails only; H = 272 a whole AVX-512 chunk of 256 units and a tail.
  for (auto [T, B, H] : {std::tuple<int64_t, int64_t, int64_t>{6, 3, 5}, {4, 2, 272}}) {
    const double w = 1 / std::sqrt(double(H));  // pre-activations of order 1 at any H
    for (Dtype dt : kHalves) {
      for (bool reverse : {false, true}) {
        INFO("H ", H, " reverse ", reverse);
        check_half_op([&](const auto& v) { return lstm_layer(v[0], v[1], v[2], v[3], reverse); },
                      {{T, B, 4 * H}, {B, H}, {B, H}, {4 * H, H}}, {1, 1, 1, w}, dt, 4, "lstm_layer");
        check_half_op([&](const auto& v) { return gru_layer(v[0], v[1], v[2], v[3], reverse); },
                      {{T, B, 3 * H}, {B, H}, {3 * H, H}, {3 * H}}, {1, 1, w, 1}, dt, 4, "gru_layer");
      }
    }
  }
}

TEST_CASE("the cells' ops in bfloat16 and float16 on the CPU: every input's and weight's gradient near float64") {
  manual_seed(8);
  const int64_t B = 3, I = 4, H = 6;
  for (Dtype dt : kHalves) {
    // LSTMCell's step: gates = x W_ih^T + b_ih + h W_hh^T + b_hh, then (h', c').
    check_half_op(
        [&](const auto& v) {
          return lstm_gates(F::linear(v[0], v[3], v[5]) + F::linear(v[1], v[4], v[6]), v[2]);
        },
        {{B, I}, {B, H}, {B, H}, {4 * H, I}, {4 * H, H}, {4 * H}, {4 * H}}, {1, 1, 1, 0.5, 0.5, 0.5, 0.5}, dt, 6,
        "LSTMCell");
    check_half_op(
        [&](const auto& v) { return gru_gates(F::linear(v[0], v[2], v[4]), F::linear(v[1], v[3], v[5]), v[1]); },
        {{B, I}, {B, H}, {3 * H, I}, {3 * H, H}, {3 * H}, {3 * H}}, {1, 1, 0.5, 0.5, 0.5, 0.5}, dt, 6, "GRUCell");
  }
}

namespace {

// (output, h_n, c_n) of an LSTM or GRU (c_n undefined for GRU).
std::tuple<Tensor, Tensor, Tensor> run(nn::Module& m, const Tensor& x) {
  if (auto* l = dynamic_cast<nn::LSTMImpl*>(&m)) {
    auto [out, st] = l->forward(x);
    return {out, std::get<0>(st), std::get<1>(st)};
  }
  auto [out, h] = dynamic_cast<nn::GRUImpl&>(m).forward(x);
  return {out, h, Tensor()};
}

}  // namespace

TEST_CASE("nn::LSTM under autocast(kCPU): bfloat16 output and states near float64, float32 parameter gradients") {
  const Dtype dt = kBFloat16;
  manual_seed(6);
  nn::LSTM lstm(nn::LSTMOptions(4, 6).num_layers(2).bidirectional(true));
  nn::LSTM ref(nn::LSTMOptions(4, 6).num_layers(2).bidirectional(true));
  // The reference: float64 from the parameters autocast casts to bfloat16 (rounded once).
  ref->to(kFloat64);
  {
    NoGradGuard no_grad;
    auto p = lstm->parameters(), pr = ref->parameters();
    for (size_t i = 0; i < p.size(); ++i) internal::copy_(pr[i], internal::to_dtype(p[i], dt));
  }
  Tensor x = half_values({5, 3, 4}, dt), x32 = internal::to_dtype(x, kFloat32).set_requires_grad();
  x.set_requires_grad();
  Tensor out, h, c;
  {
    autocast guard(kCPU, dt);
    std::tie(out, h, c) = run(*lstm, x32);
  }
  auto [out_r, h_r, c_r] = run(*ref, x);
  // As PyTorch's mkldnn_rnn_layer under CPU autocast: output, h_n and c_n all bfloat16.
  check_half(out, out_r, dt, 4, "output");
  check_half(h, h_r, dt, 4, "h_n");
  check_half(c, c_r, dt, 4, "c_n");
  Tensor w = half_values(out_r.shape(), dt);
  sum(out_r * w).backward();
  sum(out * internal::to_dtype(w, dt)).backward();
  REQUIRE(x32.grad().defined());
  CHECK(x32.grad().dtype() == kFloat32);
  check_half(internal::to_dtype(x32.grad(), dt), x.grad(), dt, 8, "input grad");
  auto p = lstm->named_parameters(), pr = ref->named_parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    INFO(p[i].first);
    REQUIRE(p[i].second.grad().defined());
    CHECK(p[i].second.grad().dtype() == kFloat32);
    check_half(internal::to_dtype(p[i].second.grad(), dt), pr[i].second.grad(), dt, 8, p[i].first + ".grad");
  }
}

TEST_CASE("nn::LSTM and nn::GRU in bfloat16 and float16 on the CPU run the fused 16-bit layers, near float64") {
  for (Dtype dt : kHalves) {
    for (bool is_lstm : {true, false}) {
      INFO(std::string(is_lstm ? "LSTM " : "GRU "), dtype_name(dt));
      manual_seed(9);
      auto make = [&]() -> std::shared_ptr<nn::Module> {
        if (is_lstm) return nn::LSTM(nn::LSTMOptions(4, 6).num_layers(2)).ptr();
        return nn::GRU(nn::GRUOptions(4, 6).num_layers(2)).ptr();
      };
      std::shared_ptr<nn::Module> half = make(), ref64 = make();
      nn::Module &m = *half, &ref = *ref64;
      m.to(dt);
      ref.to(kFloat64);
      {
        NoGradGuard no_grad;
        auto p = m.parameters(), pr = ref.parameters();
        for (size_t i = 0; i < p.size(); ++i) internal::copy_(pr[i], internal::to_dtype(p[i], kFloat64));
      }
      Tensor x = half_values({5, 3, 4}, dt);
      auto [out, h, c] = run(m, internal::to_dtype(x, dt));
      auto [out_r, h_r, c_r] = run(ref, x);
      check_half(out, out_r, dt, 4, "output");
      check_half(h, h_r, dt, 4, "h_n");
      if (is_lstm) check_half(c, c_r, dt, 4, "c_n");
      Tensor w = half_values(out_r.shape(), dt);
      sum(out_r * w).backward();
      sum(out * internal::to_dtype(w, dt)).backward();
      auto p = m.named_parameters(), pr = ref.named_parameters();
      for (size_t i = 0; i < p.size(); ++i) check_half(p[i].second.grad(), pr[i].second.grad(), dt, 8, p[i].first);
    }
  }
}

TEST_CASE("an LSTM under autocast(kCPU) keeps no float32 tensor: the layer op's states and gates are bfloat16") {
  REQUIRE(memory_stats::enabled());  // LOCKSTEP_MEMORY_STATS=1 (tests/nn/BUILD)
  auto live = [](const char* label, Dtype dt) { return memory_stats::snapshot().bytes(label, dt); };
  manual_seed(7);
  nn::LSTM lstm(nn::LSTMOptions(4, 6).num_layers(2));
  Tensor x = randn({5, 3, 4});
  const size_t f32 = live(nullptr, kFloat32), bf16 = live(nullptr, kBFloat16);
  Tensor out;
  {
    autocast guard(kCPU);
    out = std::get<0>(lstm(x));
  }
  CHECK(out.dtype() == kBFloat16);
  CHECK(live(nullptr, kFloat32) == f32);
  CHECK(live("lstm_layer", kFloat32) == 0);
  CHECK(live("lstm_layer", kBFloat16) >= 2 * size_t{2 * 6 * 3 * 6 * 2});  // [2, T + 1, B, H] per layer
  CHECK(live(nullptr, kBFloat16) > bf16);
  sum(out).backward();
  for (const Tensor& p : lstm->parameters()) CHECK(p.grad().dtype() == kFloat32);
}

TEST_CASE("under autocast(kCPU) GRU and the cells follow PyTorch's CPU lists: only their products in bfloat16") {
  manual_seed(10);
  Tensor x = randn({5, 3, 4}), x0 = randn({3, 4}), h0 = randn({3, 6}), c0 = randn({3, 6});
  // GRU is on no CPU list (PyTorch's CPU autocast lowers only LSTM): float32 throughout, as outside.
  nn::GRU gru(nn::GRUOptions(4, 6));
  Tensor plain = std::get<0>(gru(x)), cast;
  {
    autocast guard(kCPU);
    cast = std::get<0>(gru(x));
  }
  CHECK(cast.dtype() == kFloat32);
  CHECK(allclose(cast, plain, 0, 0));
  // The cells: x W_ih^T + b_ih and h W_hh^T + b_hh in bfloat16, the gates with the float32 states by
  // type promotion (PyTorch: LSTMCell and GRUCell give float32, RNNCell bfloat16).
  nn::LSTMCell lc(4, 6);
  nn::GRUCell gc(4, 6);
  nn::RNNCell rc(4, 6);
  auto bf = [](const Tensor& t) { return t.to(kBFloat16); };
  Tensor lh, lcc, gh, rh;
  {
    autocast guard(kCPU);
    std::tie(lh, lcc) = lc(x0, std::make_tuple(h0, c0));
    gh = gc(x0, h0);
    rh = rc(x0, h0);
  }
  CHECK(lh.dtype() == kFloat32);
  CHECK(lcc.dtype() == kFloat32);
  CHECK(gh.dtype() == kFloat32);
  CHECK(rh.dtype() == kBFloat16);
  Tensor lg = F::linear(bf(x0), bf(lc->weight_ih), bf(lc->bias_ih)) + F::linear(bf(h0), bf(lc->weight_hh), bf(lc->bias_hh));
  Tensor l_want = lstm_gates(lg, c0);
  CHECK(allclose(lh, narrow(l_want, 1, 0, 6), 1e-2, 1e-2));
  CHECK(allclose(lcc, narrow(l_want, 1, 6, 6), 1e-2, 1e-2));
  Tensor g_want = gru_gates(F::linear(bf(x0), bf(gc->weight_ih), bf(gc->bias_ih)),
                            F::linear(bf(h0), bf(gc->weight_hh), bf(gc->bias_hh)), h0);
  CHECK(allclose(gh, g_want, 1e-2, 1e-2));
  Tensor r_want = tanh(F::linear(bf(x0), bf(rc->weight_ih), bf(rc->bias_ih)) +
                       F::linear(bf(h0), bf(rc->weight_hh), bf(rc->bias_hh)));
  CHECK(allclose(rh, r_want, 0, 0));
  // Not the float32 values: the products were rounded to bfloat16.
  CHECK_FALSE(allclose(std::get<0>(lc(x0, std::make_tuple(h0, c0))), lh, 0, 0));
}

TEST_CASE("16-bit recurrent layers and cells reject operands of mixed dtypes outside autocast, naming them") {
  nn::LSTM lstm(nn::LSTMOptions(4, 6));
  auto msg = error_of([&] { lstm(zeros({5, 3, 4}, kBFloat16)); });
  CHECK(msg.find("LSTM: expected a float32 input, got bfloat16") != std::string::npos);
  lstm->to(kBFloat16);
  msg = error_of([&] { lstm(zeros({5, 3, 4}, kBFloat16), std::make_tuple(zeros({1, 3, 6}), zeros({1, 3, 6}))); });
  CHECK(msg.find("LSTM: h0 is float32 on cpu but the layer is bfloat16 on cpu") != std::string::npos);
  nn::GRU gru(nn::GRUOptions(4, 6));
  gru->to(kFloat16);
  msg = error_of([&] { gru(zeros({5, 3, 4}, kBFloat16)); });
  CHECK(msg.find("GRU: expected a float16 input, got bfloat16") != std::string::npos);
  nn::LSTMCell cell(4, 6);
  cell->to(kBFloat16);
  msg = error_of([&] { cell(zeros({3, 4}, kBFloat16), std::make_tuple(zeros({3, 6}), zeros({3, 6}))); });
  CHECK(msg.find("LSTMCell: h is float32 on cpu but the input is bfloat16 on cpu") != std::string::npos);
  msg = error_of([] {
    lstm_layer(zeros({2, 3, 24}, kBFloat16), zeros({3, 6}, kBFloat16), zeros({3, 6}, kFloat16),
               zeros({24, 6}, kBFloat16));
  });
  CHECK(msg.find("lstm_layer: c0 [3, 6] float16 on cpu does not match h0 [3, 6] bfloat16 on cpu") !=
        std::string::npos);
}
