// Autocast (autograd/autocast.h): which dtype each op gives under autocast(kCPU, kBFloat16), against
// the table PyTorch's CPU autocast prints (tools/fixtures/autocast_policy.py); gradients reaching
// float32 parameters in float32; the cast cache; nesting and enabled = false; bad dtypes.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>

#include "nn/api.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using testing::expect_error;
namespace F = lockstep::nn::functional;

namespace {

// A recurrent layer with parameters of dt.
template <typename M, typename Options>
M module(const Options& options, Dtype dt) {
  M m(options);
  m->to(dt);
  return m;
}

std::map<std::string, std::function<Tensor()>> ops(Dtype dt) {
  manual_seed(0);
  Tensor x = randn({4, 8}).to(dt), w = randn({6, 8}).to(dt), b = randn({6}).to(dt);
  Tensor img = randn({2, 3, 8, 8}).to(dt), cw = randn({4, 3, 3, 3}).to(dt);
  Tensor q = randn({1, 2, 5, 4}).to(dt), p = rand({4, 6}).to(dt);
  Tensor t = tensor(std::vector<int64_t>{0, 5, 2, 3});
  return {
      {"linear", [=] { return F::linear(x, w, b); }},
      {"matmul", [=] { return matmul(x, w.t()); }},
      {"conv2d", [=] { return F::conv2d(img, cw); }},
      {"scaled_dot_product_attention", [=] { return F::scaled_dot_product_attention(q, q, q); }},
      {"softmax", [=] { return softmax(x, -1); }},
      {"log_softmax", [=] { return log_softmax(x, -1); }},
      {"layer_norm", [=] { return F::layer_norm(x, {8}); }},
      {"sum", [=] { return x.sum(); }},
      {"exp", [=] { return x.exp(); }},
      {"log", [=] { return x.abs().log(); }},
      {"pow", [=] { return x.pow(2); }},
      {"rsqrt", [=] { return x.abs().rsqrt(); }},
      {"prod", [=] { return x.prod(); }},
      {"relu", [=] { return F::relu(x); }},
      {"add", [=] { return x + x; }},
      {"cross_entropy", [=] { return F::cross_entropy(x.narrow(1, 0, 6), t); }},
      {"nll_loss", [=] { return F::nll_loss(x.narrow(1, 0, 6), t); }},
      {"mse_loss", [=] { return F::mse_loss(x, x + 1.0); }},
      {"binary_cross_entropy", [=] { return F::binary_cross_entropy(p, p); }},
      {"binary_cross_entropy_with_logits", [=] { return F::binary_cross_entropy_with_logits(x, x); }},
      {"lstm", [=] { return std::get<0>(module<nn::LSTM>(nn::LSTMOptions(8, 6), dt)(x.unsqueeze(1))); }},
      {"gru", [=] { return std::get<0>(module<nn::GRU>(nn::GRUOptions(8, 6), dt)(x.unsqueeze(1))); }},
      {"rnn_tanh", [=] { return std::get<0>(module<nn::RNN>(nn::RNNOptions(8, 6), dt)(x.unsqueeze(1))); }},
      {"lstm_cell", [=] { return std::get<0>(module<nn::LSTMCell>(nn::LSTMCellOptions(8, 6), dt)(x)); }},
      {"lstm_cell_c", [=] { return std::get<1>(module<nn::LSTMCell>(nn::LSTMCellOptions(8, 6), dt)(x)); }},
      {"gru_cell", [=] { return module<nn::GRUCell>(nn::GRUCellOptions(8, 6), dt)(x); }},
      {"rnn_tanh_cell", [=] { return module<nn::RNNCell>(nn::RNNCellOptions(8, 6), dt)(x); }},
      {"rnn_relu_cell",
       [=] { return module<nn::RNNCell>(nn::RNNCellOptions(8, 6).nonlinearity("relu"), dt)(x); }},
  };
}

}  // namespace

TEST_CASE("under autocast(kCPU, kBFloat16) each op gives the dtype PyTorch's CPU autocast gives") {
  // tools/fixtures/autocast_policy.py, PyTorch 2.x: the ops of its lower-precision list run in bf16
  // (LSTM among them, GRU not), the losses and prod in float32, the rest in their operands' dtype.
  const std::map<std::string, std::pair<Dtype, Dtype>> want = {  // from float32, from bfloat16 operands
      {"linear", {kBFloat16, kBFloat16}},    {"matmul", {kBFloat16, kBFloat16}},
      {"conv2d", {kBFloat16, kBFloat16}},    {"softmax", {kFloat32, kBFloat16}},
      {"scaled_dot_product_attention", {kBFloat16, kBFloat16}},
      {"log_softmax", {kFloat32, kBFloat16}}, {"layer_norm", {kFloat32, kBFloat16}},
      {"sum", {kFloat32, kBFloat16}},        {"exp", {kFloat32, kBFloat16}},
      {"log", {kFloat32, kBFloat16}},        {"pow", {kFloat32, kBFloat16}},
      {"rsqrt", {kFloat32, kBFloat16}},      {"prod", {kFloat32, kFloat32}},
      {"relu", {kFloat32, kBFloat16}},       {"add", {kFloat32, kBFloat16}},
      {"cross_entropy", {kFloat32, kFloat32}}, {"nll_loss", {kFloat32, kFloat32}},
      {"mse_loss", {kFloat32, kFloat32}},    {"binary_cross_entropy", {kFloat32, kFloat32}},
      {"binary_cross_entropy_with_logits", {kFloat32, kFloat32}},
      {"lstm", {kBFloat16, kBFloat16}},      {"gru", {kFloat32, kBFloat16}},  // oneDNN's LSTM only
      {"rnn_tanh", {kBFloat16, kBFloat16}},  // a composite: bf16 products, tanh keeps bf16
      // No cell is on a CPU list: their products (linear) run in bf16, and the gates follow type
      // promotion with the float32 states, so LSTMCell's and GRUCell's outputs are float32.
      {"lstm_cell", {kFloat32, kBFloat16}},  {"lstm_cell_c", {kFloat32, kBFloat16}},
      {"gru_cell", {kFloat32, kBFloat16}},   {"rnn_tanh_cell", {kBFloat16, kBFloat16}},
      {"rnn_relu_cell", {kBFloat16, kBFloat16}},
  };
  for (Dtype dt : {kFloat32, kBFloat16}) {
    auto table = ops(dt);
    REQUIRE(table.size() == want.size());
    autocast guard(kCPU, kBFloat16);
    CHECK(is_autocast_enabled(kCPU));
    CHECK(!is_autocast_enabled(kCUDA));
    for (auto& [name, f] : table) {
      CAPTURE(name);
      CAPTURE(dt);
      const auto& w = want.at(name);
      CHECK(f().dtype() == (dt == kFloat32 ? w.first : w.second));
    }
  }
  // Outside autocast, and for float64 operands inside it, nothing is cast.
  CHECK(!is_autocast_enabled(kCPU));
  for (auto& [name, f] : ops(kFloat32)) CHECK(f().dtype() == kFloat32);
  autocast guard(kCPU, kBFloat16);
  for (auto& [name, f] : ops(kFloat64)) CHECK(f().dtype() == kFloat64);
}

TEST_CASE("the recurrent ops are lowered where PyTorch's autocast lists them, on each device") {
  // tools/fixtures/autocast_policy.py's "listed" rows, PyTorch 2.x: AutocastCUDA kernels for
  // lstm_cell, gru_cell, rnn_tanh_cell, rnn_relu_cell, the _thnn fused cells and _cudnn_rnn (every
  // layer); AutocastCPU for mkldnn_rnn_layer (the LSTM layer) only.
  using autograd::amp::AutocastOp;
  using autograd::amp::lowers;
  CHECK(lowers(AutocastOp::LSTM, kCPU));
  CHECK_FALSE(lowers(AutocastOp::RNN, kCPU));      // GRU, RNN
  CHECK_FALSE(lowers(AutocastOp::RNNCell, kCPU));  // LSTMCell, GRUCell, RNNCell
  CHECK(lowers(AutocastOp::LSTM, kCUDA));
  CHECK(lowers(AutocastOp::RNN, kCUDA));
  CHECK(lowers(AutocastOp::RNNCell, kCUDA));
  CHECK(lowers(AutocastOp::Linear, kCPU));  // what the CPU cells' products run under
  // A whole layer's rule is its row: GRU one op (float32 on the CPU, lowered on CUDA), RNN on the CPU
  // PyTorch's composite (each op by its own row).
  using autograd::amp::runs_composite;
  CHECK_FALSE(lowers(AutocastOp::GRU, kCPU));
  CHECK(lowers(AutocastOp::GRU, kCUDA));
  CHECK(runs_composite(AutocastOp::RNN, kCPU));
  CHECK_FALSE(runs_composite(AutocastOp::RNN, kCUDA));
  CHECK_FALSE(runs_composite(AutocastOp::GRU, kCPU));
  CHECK_FALSE(runs_composite(AutocastOp::LSTM, kCPU));
}

TEST_CASE("autocast: bf16 products with float32 gradients for float32 parameters") {
  manual_seed(1);
  nn::Linear lin(8, 4);
  Tensor x = randn({5, 8});
  Tensor y;
  {
    autocast guard(kCPU);
    y = lin(x);
    CHECK(y.dtype() == kBFloat16);
    CHECK(F::mse_loss(y, zeros({5, 4}, kBFloat16)).dtype() == kFloat32);
  }
  (y.to(kFloat32) * y.to(kFloat32)).sum().backward();
  REQUIRE(lin->weight.grad().defined());
  CHECK(lin->weight.grad().dtype() == kFloat32);
  CHECK(lin->bias.grad().dtype() == kFloat32);
  // The same as float32 on the bf16-rounded operands, within bf16's rounding of y and of the products.
  Tensor xr = x.to(kBFloat16).to(kFloat32), wr = lin->weight.detach().to(kBFloat16).to(kFloat32);
  Tensor br = lin->bias.detach().to(kBFloat16).to(kFloat32);
  Tensor yr = F::linear(xr, wr, br);
  CHECK(allclose(y.to(kFloat32), yr, 1e-2, 1e-2));
  Tensor gw = matmul((2.0 * yr).t(), xr);  // d/dW of sum(y^2) = 2 y^T x
  CHECK(allclose(lin->weight.grad(), gw, 3e-2, 3e-2));
}

TEST_CASE("autocast casts a parameter once per region, and again after it changes in place") {
  nn::Linear lin(3, 3);
  Tensor x = ones({2, 3});
  CHECK(autograd::amp::cached_casts() == 0);
  {
    autocast guard(kCPU);
    Tensor a = lin(x), b = lin(x);  // weight and bias: two casts, reused by the second call
    CHECK(autograd::amp::cached_casts() == 2);
    CHECK(allclose(a.to(kFloat32), b.to(kFloat32)));
    {
      autocast inner(kCPU);  // nesting keeps the cache
      lin(x);
    }
    CHECK(autograd::amp::cached_casts() == 2);
    {
      NoGradGuard no_grad;
      lin->weight.fill_(0.0);  // an update inside the region: the next use casts again
      lin->bias.fill_(1.0);
    }
    CHECK(lin(x).to(kFloat32).to_vector<float>() == std::vector<float>(6, 1.0f));
    {
      autocast off(kCPU, kBFloat16, /*enabled=*/false);
      CHECK(!is_autocast_enabled(kCPU));
      CHECK(lin(x).dtype() == kFloat32);
    }
    CHECK(is_autocast_enabled(kCPU));
  }
  CHECK(autograd::amp::cached_casts() == 0);  // emptied with the outermost region
  CHECK(!is_autocast_enabled(kCPU));
}

TEST_CASE("autocast rejects a dtype it can't run in") {
  expect_error("float32", [] { autocast guard(kCPU, kFloat32); }, {"autocast", "float32", "bfloat16"});
  expect_error("int64 on CUDA", [] { autocast guard(kCUDA, kInt64); }, {"autocast", "int64", "CUDA", "float16"});
  expect_error("float16 on the CPU", [] { autocast guard(kCPU, kFloat16); }, {"autocast", "float16", "CPU"});
  {
    autocast fp16(kCUDA, kFloat16);  // the state only: no GPU needed
    CHECK(is_autocast_enabled(kCUDA));
    CHECK(get_autocast_dtype(kCUDA) == kFloat16);
  }
  CHECK(!is_autocast_enabled(kCPU));
}
