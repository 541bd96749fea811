// Recurrent layers against PyTorch: tests/fixtures/rnn_fixtures.safetensors (written by
// tools/fixtures/make_rnn_fixtures.py) holds, per case, PyTorch's parameters, input, state, outputs and
// the gradients of sum(out * g.out) + sum(h_n * g.h_n) (+ c_n) in float64; each case loads the
// parameters through load_state_dict (so PyTorch's names and shapes are checked too), runs the same
// forward and backward and compares. Then float64 gradcheck of the gate ops and each cell, PyTorch's
// initialisation, dropout between layers, and the errors for bad shapes.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nn/api.h"
#include "tensor/safetensors.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;

namespace {

constexpr const char* kFixtures = "tests/fixtures/rnn_fixtures.safetensors";

const std::map<std::string, Tensor>& fixtures() {
  static const std::map<std::string, Tensor> all = [] {
    std::map<std::string, Tensor> m;
    for (auto& [k, v] : load_safetensors(kFixtures).tensors) m.emplace(k, v);
    return m;
  }();
  return all;
}

bool has(const std::string& key) { return fixtures().count(key) > 0; }

Tensor fx(const std::string& key) {
  auto it = fixtures().find(key);
  REQUIRE_MESSAGE(it != fixtures().end(), "fixture '", key, "' is missing (rerun tools/fixtures/make_rnn_fixtures.py)");
  return it->second.clone();
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-9) {
  REQUIRE_MESSAGE(got.defined(), what, ": undefined");
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs PyTorch's ", want.shape());
  auto g = got.to(kFloat64).contiguous().to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  int64_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double err = std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
    if (err > worst) worst = err, at = static_cast<int64_t>(i);
  }
  CHECK_MESSAGE(worst <= tol, what, ": element ", at, " is ", g[at], ", PyTorch's ", w[at]);
}

// The outputs of one forward, by fixture name (out, h_n, c_n).
using Outputs = std::map<std::string, Tensor>;

// Loads case c's parameters into m (float64, strict), runs fn(x, h0, c0) and compares the outputs and
// the gradients of x, the state and every parameter with PyTorch's.
void check_case(const std::string& c, nn::Module& m, const std::function<Outputs(Tensor&, Tensor&, Tensor&)>& fn) {
  INFO("case ", c);
  m.to(kFloat64);
  nn::NamedTensors state;
  for (auto& [k, v] : fixtures())
    if (k.rfind(c + ".param.", 0) == 0) state.emplace_back(k.substr(c.size() + 7), v.clone());
  REQUIRE(state.size() == m.named_parameters().size());
  m.load_state_dict(state);
  Tensor x = fx(c + ".x").set_requires_grad(), h0, c0;
  if (has(c + ".h0")) h0 = fx(c + ".h0").set_requires_grad();
  if (has(c + ".c0")) c0 = fx(c + ".c0").set_requires_grad();
  Outputs outs = fn(x, h0, c0);
  Tensor loss = zeros({}, kFloat64);
  for (auto& [k, o] : outs) {
    check_close(o, fx(c + "." + k), c + "." + k);
    loss = loss + sum(o * fx(c + ".g." + k));
  }
  loss.backward();
  check_close(x.grad(), fx(c + ".grad.x"), c + ".grad.x");
  if (h0.defined()) check_close(h0.grad(), fx(c + ".grad.h0"), c + ".grad.h0");
  if (c0.defined()) check_close(c0.grad(), fx(c + ".grad.c0"), c + ".grad.c0");
  for (auto& [k, p] : m.named_parameters()) check_close(p.grad(), fx(c + ".grad." + k), c + ".grad." + k);
}

}  // namespace

TEST_CASE("LSTM matches PyTorch: 2 layers bidirectional with a state, batch_first, unbatched without bias") {
  nn::LSTM bi(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true));
  check_case("lstm_bi", *bi, [&](Tensor& x, Tensor& h0, Tensor& c0) {
    auto [out, state] = bi(x, std::make_tuple(h0, c0));
    return Outputs{{"out", out}, {"h_n", std::get<0>(state)}, {"c_n", std::get<1>(state)}};
  });
  nn::LSTM bf(nn::LSTMOptions(3, 4).num_layers(2).batch_first(true));
  check_case("lstm_bf", *bf, [&](Tensor& x, Tensor&, Tensor&) {
    auto [out, state] = bf(x);
    auto [h, c] = state;
    return Outputs{{"out", out}, {"h_n", h}, {"c_n", c}};
  });
  nn::LSTM ub(nn::LSTMOptions(3, 4).bias(false));
  check_case("lstm_unbatched", *ub, [&](Tensor& x, Tensor&, Tensor&) {
    auto [out, state] = ub(x);
    return Outputs{{"out", out}, {"h_n", std::get<0>(state)}, {"c_n", std::get<1>(state)}};
  });
}

TEST_CASE("LSTM and GRU in float32 stay within float32 rounding of PyTorch's float64 outputs") {
  // The gate ops take tanh as 2 sigmoid(2x) - 1; in float32 that is a few ulps of 1 in absolute terms.
  for (std::string c : {"lstm_bi", "gru_bi"}) {
    INFO("case ", c);
    std::shared_ptr<nn::Module> m;
    if (c == "lstm_bi") m = nn::LSTM(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true)).ptr();
    else m = nn::GRU(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true)).ptr();
    nn::NamedTensors state;
    for (auto& [k, v] : fixtures())
      if (k.rfind(c + ".param.", 0) == 0) state.emplace_back(k.substr(c.size() + 7), v.to(kFloat32));
    m->load_state_dict(state);
    Tensor x = fx(c + ".x").to(kFloat32), h0 = fx(c + ".h0").to(kFloat32);
    Tensor out = c == "lstm_bi"
                     ? std::get<0>(m->as<nn::LSTM>()->forward(x, std::make_tuple(h0, fx(c + ".c0").to(kFloat32))))
                     : std::get<0>(m->as<nn::GRU>()->forward(x, h0));
    check_close(out, fx(c + ".out"), c + ".out in float32", 2e-6);
  }
}

TEST_CASE("GRU matches PyTorch: 2 layers bidirectional with a state, batch_first, unbatched without bias") {
  nn::GRU bi(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
  check_case("gru_bi", *bi, [&](Tensor& x, Tensor& h0, Tensor&) {
    auto [out, h] = bi(x, h0);
    return Outputs{{"out", out}, {"h_n", h}};
  });
  nn::GRU bf(nn::GRUOptions(3, 4).num_layers(2).batch_first(true));
  check_case("gru_bf", *bf, [&](Tensor& x, Tensor&, Tensor&) {
    auto [out, h] = bf(x);
    return Outputs{{"out", out}, {"h_n", h}};
  });
  nn::GRU ub(nn::GRUOptions(3, 4).bias(false));
  check_case("gru_unbatched", *ub, [&](Tensor& x, Tensor&, Tensor&) {
    auto [out, h] = ub(x);
    return Outputs{{"out", out}, {"h_n", h}};
  });
}

TEST_CASE("RNN matches PyTorch: relu 2 layers bidirectional with a state, tanh batch_first, unbatched") {
  nn::RNN bi(nn::RNNOptions(3, 4).num_layers(2).bidirectional(true).nonlinearity("relu"));
  check_case("rnn_bi", *bi, [&](Tensor& x, Tensor& h0, Tensor&) {
    auto [out, h] = bi(x, h0);
    return Outputs{{"out", out}, {"h_n", h}};
  });
  nn::RNN bf(nn::RNNOptions(3, 4).num_layers(2).batch_first(true));
  check_case("rnn_bf", *bf, [&](Tensor& x, Tensor&, Tensor&) {
    auto [out, h] = bf(x);
    return Outputs{{"out", out}, {"h_n", h}};
  });
  nn::RNN ub(nn::RNNOptions(3, 4).bias(false));
  check_case("rnn_unbatched", *ub, [&](Tensor& x, Tensor&, Tensor&) {
    auto [out, h] = ub(x);
    return Outputs{{"out", out}, {"h_n", h}};
  });
}

TEST_CASE("LSTMCell, GRUCell and RNNCell match PyTorch") {
  nn::LSTMCell lstm(3, 4);
  check_case("lstm_cell", *lstm, [&](Tensor& x, Tensor& h0, Tensor& c0) {
    auto [h, c] = lstm(x, std::make_tuple(h0, c0));
    return Outputs{{"out", h}, {"c_n", c}};
  });
  nn::GRUCell gru(3, 4);
  check_case("gru_cell", *gru, [&](Tensor& x, Tensor& h0, Tensor&) { return Outputs{{"out", gru(x, h0)}}; });
  nn::RNNCell rnn(3, 4);
  check_case("rnn_cell", *rnn, [&](Tensor& x, Tensor& h0, Tensor&) { return Outputs{{"out", rnn(x, h0)}}; });
  nn::RNNCell relu(nn::RNNCellOptions(3, 4).nonlinearity("relu"));  // unbatched
  check_case("rnn_cell_relu", *relu, [&](Tensor& x, Tensor& h0, Tensor&) { return Outputs{{"out", relu(x, h0)}}; });
}

TEST_CASE("gradcheck in float64: the gate ops and each cell") {
  manual_seed(1);
  testing::gradcheck([](auto& v) { return lstm_gates(v[0], v[1]); },
                     {randn({2, 12}, kFloat64), randn({2, 3}, kFloat64)});
  testing::gradcheck([](auto& v) { return gru_gates(v[0], v[1], v[2]); },
                     {randn({2, 9}, kFloat64), randn({2, 9}, kFloat64), randn({2, 3}, kFloat64)});
  nn::LSTMCell lstm(2, 3);
  lstm->to(kFloat64);
  testing::gradcheck(
      [&](auto& v) {
        auto [h, c] = lstm(v[0], std::make_tuple(v[1], v[2]));
        return cat({h, c}, 1);
      },
      {randn({2, 2}, kFloat64), randn({2, 3}, kFloat64), randn({2, 3}, kFloat64), lstm->weight_ih, lstm->weight_hh,
       lstm->bias_ih});
  nn::GRUCell gru(2, 3);
  gru->to(kFloat64);
  testing::gradcheck([&](auto& v) { return gru(v[0], v[1]); },
                     {randn({2, 2}, kFloat64), randn({2, 3}, kFloat64), gru->weight_ih, gru->weight_hh, gru->bias_hh});
  nn::RNNCell rnn(2, 3);
  rnn->to(kFloat64);
  testing::gradcheck([&](auto& v) { return rnn(v[0], v[1]); },
                     {randn({2, 2}, kFloat64), randn({2, 3}, kFloat64), rnn->weight_ih, rnn->weight_hh, rnn->bias_ih});
  // The whole layer, through both directions and two layers.
  nn::LSTM layer(nn::LSTMOptions(2, 2).num_layers(2).bidirectional(true));
  layer->to(kFloat64);
  testing::gradcheck([&](auto& v) { return std::get<0>(layer(v[0])); }, {randn({3, 2, 2}, kFloat64)});
}

TEST_CASE("gradcheck in float64: the fused layer ops, both directions, every input and state row") {
  manual_seed(5);
  for (bool reverse : {false, true}) {
    INFO("reverse ", reverse);
    // T 3, B 2, H 3: every row of the result, h0's and c0's included, is weighted by gradcheck.
    testing::gradcheck([&](auto& v) { return lstm_layer(v[0], v[1], v[2], v[3], reverse); },
                       {randn({3, 2, 12}, kFloat64), randn({2, 3}, kFloat64), randn({2, 3}, kFloat64),
                        randn({12, 3}, kFloat64)});
    testing::gradcheck([&](auto& v) { return gru_layer(v[0], v[1], v[2], v[3], reverse); },
                       {randn({3, 2, 9}, kFloat64), randn({2, 3}, kFloat64), randn({9, 3}, kFloat64),
                        randn({9}, kFloat64)});
  }
  // A transposed (non-contiguous) W_hh and no b_hh.
  testing::gradcheck([](auto& v) { return gru_layer(v[0], v[1], transpose(v[2], 0, 1), Tensor(), true); },
                     {randn({2, 1, 6}, kFloat64), randn({1, 2}, kFloat64), randn({2, 6}, kFloat64)});
  // Whole GRU and LSTM layers: batch_first, two layers, both directions, given states.
  nn::GRU gru(nn::GRUOptions(2, 2).num_layers(2).bidirectional(true).batch_first(true));
  gru->to(kFloat64);
  testing::gradcheck([&](auto& v) { return std::get<0>(gru(v[0], v[1])); },
                     {randn({2, 3, 2}, kFloat64), randn({4, 2, 2}, kFloat64)});
  nn::LSTM lstm(nn::LSTMOptions(2, 2).num_layers(2));
  lstm->to(kFloat64);
  testing::gradcheck(
      [&](auto& v) {
        auto [out, st] = lstm(v[0], std::make_tuple(v[1], v[2]));
        return cat({reshape(out, {-1}), reshape(std::get<0>(st), {-1}), reshape(std::get<1>(st), {-1})});
      },
      {randn({3, 2, 2}, kFloat64), randn({2, 2, 2}, kFloat64), randn({2, 2, 2}, kFloat64), lstm->all_weights()[1]});
}

TEST_CASE("the fused layers: dropout between layers in training, errors naming the op and the shapes") {
  manual_seed(6);
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).dropout(0.5));
  Tensor x = randn({5, 2, 3}).set_requires_grad();
  auto [a, sa] = lstm(x);
  auto [b, sb] = lstm(x);
  CHECK_FALSE(allclose(a, b));  // the first layer's output is dropped differently
  sum(a).backward();
  CHECK(x.grad().defined());
  for (auto& p : lstm->parameters()) CHECK(p.grad().defined());
  lstm->eval();
  CHECK(allclose(std::get<0>(lstm(x)), std::get<0>(lstm(x))));
  auto msg = error_of([] { lstm_layer(zeros({3, 2, 8}), zeros({2, 3}), zeros({2, 3}), zeros({12, 3})); });
  CHECK(msg.find("lstm_layer") != std::string::npos);
  CHECK(msg.find("[3, 2, 8]") != std::string::npos);
  msg = error_of([] { gru_layer(zeros({3, 2, 9}), zeros({2, 3}), zeros({9, 3}), zeros({6})); });
  CHECK(msg.find("gru_layer") != std::string::npos);
  CHECK(msg.find("[6]") != std::string::npos);
  msg = error_of([] { gru_layer(zeros({3, 2, 9}, kFloat64), zeros({2, 3}), zeros({9, 3}), Tensor()); });
  CHECK(msg.find("float64") != std::string::npos);
  // Every floating dtype runs (16-bit ones in tests/nn/rnn_half_test.cpp), one dtype for all operands.
  msg = error_of([] {
    lstm_layer(zeros({3, 2, 12}, kBFloat16), zeros({2, 3}), zeros({2, 3}), zeros({12, 3}, kBFloat16));
  });
  CHECK(msg.find("lstm_layer: dtypes differ: bfloat16 and float32") != std::string::npos);
  msg = error_of([] { gru_layer(zeros({3, 2, 9}, kFloat16), zeros({2, 3}, kFloat16), zeros({9, 3}), Tensor()); });
  CHECK(msg.find("gru_layer: dtypes differ: float16 and float32") != std::string::npos);
  msg = error_of([] {
    lstm_layer(zeros({3, 2, 12}, kInt64), zeros({2, 3}, kInt64), zeros({2, 3}, kInt64), zeros({12, 3}, kInt64));
  });
  CHECK(msg.find("lstm_layer: expected float32, float64, bfloat16 or float16 tensors, got int64") != std::string::npos);
}

TEST_CASE("parameters: PyTorch's names, shapes and initialisation bound") {
  nn::LSTM lstm(nn::LSTMOptions(3, 5).num_layers(2).bidirectional(true));
  auto named = lstm->named_parameters();
  REQUIRE(named.size() == 16);
  CHECK(named[0].first == "weight_ih_l0");
  CHECK(named[1].first == "weight_hh_l0");
  CHECK(named[2].first == "bias_ih_l0");
  CHECK(named[3].first == "bias_hh_l0");
  CHECK(named[4].first == "weight_ih_l0_reverse");
  CHECK(named[8].first == "weight_ih_l1");
  CHECK(named[0].second.shape() == Shape{20, 3});
  CHECK(named[8].second.shape() == Shape{20, 10});  // layer 1 reads both directions
  CHECK(named[9].second.shape() == Shape{20, 5});
  for (auto& [k, p] : named) CHECK_MESSAGE(max(abs(p)).item<float>() <= 1 / std::sqrt(5.0f), k);
  lstm->flatten_parameters();
  CHECK(lstm->all_weights().size() == 16);
  nn::GRU gru(nn::GRUOptions(3, 5).bias(false));
  CHECK(gru->named_parameters().size() == 2);
  CHECK(gru->named_parameters()[0].second.shape() == Shape{15, 3});
  nn::RNNCell cell(3, 5);
  CHECK(cell->weight_hh.shape() == Shape{5, 5});
}

TEST_CASE("dropout between layers only in training; eval is deterministic") {
  manual_seed(3);
  nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).dropout(0.5));
  Tensor x = randn({5, 2, 3});
  Tensor a = std::get<0>(gru(x)), b = std::get<0>(gru(x));
  CHECK_FALSE(allclose(a, b));
  gru->eval();
  CHECK(allclose(std::get<0>(gru(x)), std::get<0>(gru(x))));
}

TEST_CASE("errors name the module and the shapes") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2));
  auto msg = error_of([&] { lstm(zeros({5, 2, 7})); });
  CHECK(msg.find("LSTM(3, 4)") != std::string::npos);
  CHECK(msg.find("[5, 2, 7]") != std::string::npos);
  msg = error_of([&] { lstm(zeros({5, 2, 3, 1})); });
  CHECK(msg.find("2-D (unbatched) or 3-D") != std::string::npos);
  msg = error_of([&] { lstm(zeros({5, 2, 3}), std::make_tuple(zeros({1, 2, 4}), zeros({2, 2, 4}))); });
  CHECK(msg.find("h0 of shape [2, 2, 4]") != std::string::npos);
  CHECK(msg.find("[1, 2, 4]") != std::string::npos);
  msg = error_of([&] { lstm(zeros({5, 2, 3}), std::make_tuple(zeros({2, 2, 4}), zeros({2, 3, 4}))); });
  CHECK(msg.find("c0 of shape [2, 2, 4]") != std::string::npos);
  nn::GRU gru(nn::GRUOptions(3, 4).batch_first(true));
  msg = error_of([&] { gru(zeros({2, 5, 4})); });
  CHECK(msg.find("GRU(3, 4): expected input [B, T, 3], got [2, 5, 4]") != std::string::npos);
  msg = error_of([&] { gru(zeros({2, 5, 3}), zeros({1, 5, 4})); });
  CHECK(msg.find("h0 of shape [1, 2, 4]") != std::string::npos);
  nn::RNN rnn(3, 4);
  msg = error_of([&] { rnn(zeros({5, 3}), zeros({1, 2, 4})); });  // unbatched input wants a 2-D state
  CHECK(msg.find("h0 of shape [1, 4]") != std::string::npos);
  CHECK(error_of([] { nn::RNN(nn::RNNOptions(3, 4).nonlinearity("sigmoid")); }).find("\"tanh\" or \"relu\"") !=
        std::string::npos);
  nn::LSTMCell cell(3, 4);
  msg = error_of([&] { cell(zeros({2, 5})); });
  CHECK(msg.find("LSTMCell(3, 4): expected input [B, 3] or [3], got [2, 5]") != std::string::npos);
  msg = error_of([&] { cell(zeros({2, 3}), std::make_tuple(zeros({2, 4}), zeros({3, 4}))); });
  CHECK(msg.find("c of shape [2, 4]") != std::string::npos);
  nn::GRUCell gcell(3, 4);
  msg = error_of([&] { gcell(zeros({2, 3}), zeros({2, 5})); });
  CHECK(msg.find("GRUCell: expected hx of shape [2, 4]") != std::string::npos);
  CHECK(error_of([&] { lstm(zeros({5, 2, 3}, kFloat64)); }).find("LSTM: expected a float32 input") != std::string::npos);
}
