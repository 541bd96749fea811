// Recurrent layers on the GPU: a 2-layer bidirectional LSTM and GRU, forward and backward on cuda:0,
// equal the CPU's (outputs, final states, and the gradients of the input, the initial state and every
// parameter), and so do the fused layer ops they run (lstm_layer, gru_layer) in float64. Without a
// visible device every case skips.
#include <doctest/doctest.h>

#include "nn/api.h"
#include "tensor/cuda/cuda.h"
#include "tests/cuda/cuda_test_util.h"

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
