// The nn/optim stack on the GPU: a whole MLP training step on cuda:0 equals the CPU step, the layers (the
// Transformer ones too) equal the CPU's, and a model moved to the GPU and back keeps its state_dict.
// Without a visible device every case skips, and the binary prints "SKIPPED: no CUDA device" (CI counts
// it as skipped).
#include <doctest/doctest.h>

#include <cstdio>
#include <functional>

#include "nn/api.h"
#include "optim/api.h"
#include "tensor/cuda/cuda.h"
#include "tests/cuda/cuda_test_util.h"

using namespace lockstep;

namespace {

nn::Sequential mlp(uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(nn::Linear(64, 128), nn::ReLU(),
                                          nn::Linear(128, 128), nn::ReLU(),
                                          nn::Linear(128, 10));
}

}  // namespace

TEST_CASE("three MLP training steps on the GPU equal the CPU steps") {
  REQUIRE_DEVICE();
  auto cpu_model = mlp(0), gpu_model = mlp(0);
  gpu_model->to(Device::cuda(0));
  optim::SGD cpu_sgd(cpu_model->parameters(), optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
  optim::SGD gpu_sgd(gpu_model->parameters(), optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
  nn::CrossEntropyLoss ce;
  manual_seed(1);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({32, 64}), y = randint(0, 10, {32});
    cpu_sgd.zero_grad();
    gpu_sgd.zero_grad();
    Tensor cpu_loss = ce((*cpu_model)(x), y);
    Tensor gpu_loss = ce((*gpu_model)(x.to(Device::cuda(0))), y.to(Device::cuda(0)));
    CHECK(gpu_loss.item<float>() == doctest::Approx(cpu_loss.item<float>()).epsilon(1e-4));
    cpu_loss.backward();
    gpu_loss.backward();
    cpu_sgd.step();
    gpu_sgd.step();
    auto c = cpu_model->named_parameters(), g = gpu_model->named_parameters();
    for (size_t i = 0; i < c.size(); ++i) {
      INFO("step ", step, " ", c[i].first);
      CHECK(g[i].second.device() == Device::cuda(0));
      CHECK(internal::allclose(g[i].second.grad(), c[i].second.grad(), 1e-4, 1e-5));
      CHECK(internal::allclose(g[i].second, c[i].second, 1e-4, 1e-5));
    }
  }
}

TEST_CASE("a model moved to the GPU and back keeps its state_dict") {
  REQUIRE_DEVICE();
  auto model = mlp(3);
  auto before = model->state_dict();
  std::vector<Tensor> copies;
  for (auto& [_, t] : before) copies.push_back(internal::clone(t));
  Tensor w = model->parameters()[0];
  model->to(Device::cuda(0));
  CHECK(w.device() == Device::cuda(0));  // the handle follows the move
  model->to(kFloat64);
  model->to(kFloat32);
  model->to(Device::cpu());
  auto after = model->state_dict();
  REQUIRE(after.size() == copies.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].first == before[i].first);
    CHECK(after[i].second.device() == Device::cpu());
    CHECK(internal::allclose(after[i].second, copies[i], 0, 0));
  }
}

TEST_CASE("training steps in the steady state take no new device memory (the caching allocator serves them)") {
  REQUIRE_DEVICE();
  const Device gpu = Device::cuda(0);
  auto model = mlp(5);
  model->to(gpu);
  optim::SGD sgd(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss ce;
  manual_seed(2);
  Tensor x = randn({32, 64}).to(gpu), y = randint(0, 10, {32}).to(gpu);
  auto step = [&] {
    sgd.zero_grad();
    Tensor loss = ce((*model)(x), y);
    loss.backward();
    sgd.step();
    return loss.item<float>();  // synchronizes, as a training loop's logging does
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up: momentum buffers, gradients, the allocator's cache
  const size_t reserved = cuda::memory_reserved(0), allocated = cuda::memory_allocated(0);
  float first = 0, last = 0;
  for (int i = 0; i < 5; ++i) (i == 0 ? first : last) = step();
  // reserved grows only by cudaMalloc: unchanged means every block came from the cache.
  CHECK(cuda::memory_reserved(0) == reserved);
  CHECK(cuda::memory_allocated(0) == allocated);
  CHECK(last < first);  // and the steps did train
}

TEST_CASE("conv2d on the GPU (im2col) equals the CPU's oneDNN kernels: strides, padding, dilation, groups, 1x1") {
  REQUIRE_DEVICE();
  namespace F = nn::functional;
  manual_seed(3);
  struct Conv {
    Shape x, w;
    nn::ExpandingArray<2> stride, padding, dilation;
    int64_t groups;
  };
  for (const Conv& c : {Conv{{2, 3, 9, 8}, {6, 3, 3, 3}, 1, 1, 1, 1}, Conv{{2, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {1, 2}, {2, 1}, 2},
                        Conv{{3, 8, 6, 6}, {8, 8, 1, 1}, 2, 0, 1, 1}, Conv{{2, 4, 7, 7}, {4, 1, 3, 3}, 1, 1, 2, 4}}) {
    Tensor x = randn(c.x), w = randn(c.w), b = randn({c.w[0]}), gy;
    std::vector<Tensor> grads[2];
    Tensor out[2];
    for (int d = 0; d < 2; ++d) {
      const Device dev = d ? Device::cuda(0) : Device::cpu();
      std::vector<Tensor> leaves;
      for (const Tensor& t : {x, w, b}) leaves.push_back(t.detach().to(dev).set_requires_grad());
      out[d] = F::conv2d(leaves[0], leaves[1], leaves[2], c.stride, c.padding, c.dilation, c.groups);
      if (!gy.defined()) gy = randn(out[d].shape());
      out[d].backward(gy.to(dev));
      for (const Tensor& t : leaves) grads[d].push_back(t.grad().cpu());
    }
    INFO("x ", c.x, " weight ", c.w);
    CHECK(internal::allclose(out[1].cpu(), out[0], 1e-4, 1e-4));
    for (int i = 0; i < 3; ++i) CHECK(internal::allclose(grads[1][i], grads[0][i], 1e-4, 1e-4));
  }
}

TEST_CASE("the layers and losses of nn/ on the GPU equal the CPU: values and gradients") {
  REQUIRE_DEVICE();
  namespace F = nn::functional;
  const Device gpu = Device::cuda(0);
  manual_seed(2);
  Tensor x = randn({4, 3, 9, 8}), w = randn({6, 3, 3, 3}) * 0.3, b = randn({6});
  Tensor bn_w = randn({6}), ln_w = randn({12}), table = randn({10, 12}), ln_b = randn({12});
  Tensor idx = randint(0, 10, {4, 5}), target = randint(0, 5, {4}), tokens = randint(0, 5, {4});
  // The same computation on each device; returns the loss and the leaves whose gradients to compare.
  auto run = [&](Device d, std::vector<Tensor>& leaves) {
    leaves.clear();
    for (const Tensor& t : {x, w, b, bn_w, ln_w, table, ln_b}) leaves.push_back(t.detach().to(d).set_requires_grad());
    Tensor h = F::conv2d(leaves[0], leaves[1], leaves[2], {2, 1}, 1, {1, 2});
    h = F::batch_norm(h, Tensor(), Tensor(), leaves[3], Tensor(), true);
    h = F::max_pool2d(F::gelu(h), 3, 1, 1) + F::avg_pool2d(h, 3, 1, 1, false, false);
    h = F::adaptive_avg_pool2d(h, {1, 2}).flatten(1);                 // [4, 12]
    h = F::layer_norm(h, {12}, leaves[4], leaves[6]);
    Tensor logits = h.narrow(1, 0, 5);
    Tensor emb = F::embedding(idx.to(d), leaves[5], 0);            // [4, 5, 12]
    Tensor lm = matmul(emb, h.unsqueeze(2)).squeeze(2);             // [4, 5] logits over 5 "classes"
    Tensor loss = F::cross_entropy(logits, target.to(d), nn::CrossEntropyLossOptions().label_smoothing(0.1)) +
                  F::cross_entropy(lm, tokens.to(d), nn::CrossEntropyLossOptions().ignore_index(3)) +
                  F::binary_cross_entropy_with_logits(lm, sigmoid(lm.detach()));
    loss.backward();
    return loss;
  };
  std::vector<Tensor> cpu, gpu_leaves;
  Tensor cpu_loss = run(Device::cpu(), cpu), gpu_loss = run(gpu, gpu_leaves);
  CHECK(gpu_loss.item<float>() == doctest::Approx(cpu_loss.item<float>()).epsilon(1e-4));
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("leaf ", i);
    CHECK(internal::allclose(gpu_leaves[i].grad().cpu(), cpu[i].grad(), 1e-3, 1e-4));
  }
}

TEST_CASE("batch norm's fused kernels on the GPU equal the CPU's: training, eval, 1d and 2d, float32 and float64") {
  REQUIRE_DEVICE();
  namespace F = nn::functional;
  const Device gpu = Device::cuda(0);
  manual_seed(5);
  for (Dtype dt : {kFloat32, kFloat64}) {
    for (const Shape& shape : {Shape{6, 3, 5, 7}, Shape{9, 4}, Shape{3, 2, 300}}) {
      for (bool training : {true, false}) {
        INFO(dtype_name(dt), " ", shape, training ? " training" : " eval");
        const int64_t c = shape[1];
        Tensor x = (randn(shape) * 2 + 1).to(dt), g = randn(shape).to(dt);
        Tensor w = randn({c}).to(dt), b = randn({c}).to(dt), rm = randn({c}).to(dt), rv = (rand({c}) + 0.5).to(dt);
        std::vector<Tensor> out[2];
        for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
          const Device d = on_gpu ? gpu : Device::cpu();
          std::vector<Tensor> leaves;
          for (const Tensor& t : {x, w, b}) leaves.push_back(t.detach().to(d).set_requires_grad());
          Tensor running_mean = rm.to(d).clone(), running_var = rv.to(d).clone();
          Tensor y = F::batch_norm(leaves[0], running_mean, running_var, leaves[1], leaves[2], training, 0.2);
          y.backward(g.to(d));
          out[on_gpu] = {y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad(), running_mean, running_var};
        }
        const double tol = dt == kFloat32 ? 1e-4 : 1e-10;
        for (size_t i = 0; i < out[0].size(); ++i) {
          INFO("output/gradient/statistic ", i);
          CHECK(internal::allclose(out[1][i].cpu(), out[0][i], tol, tol));
        }
      }
    }
  }
}

TEST_CASE("dropout on the GPU: its mask drawn on the device keeps about 1 - p, scales by 1 / (1 - p), repeats by seed") {
  REQUIRE_DEVICE();
  const Device gpu = Device::cuda(0);
  Tensor x = ones({200, 500}).to(gpu).set_requires_grad();
  manual_seed(11);
  Tensor y = nn::functional::dropout(x, 0.25, true);
  y.sum().backward();
  std::vector<double> v = y.detach().to(Device::cpu()).to_vector<double>();
  std::vector<double> g = x.grad().to(Device::cpu()).to_vector<double>();
  int64_t kept = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    CHECK_MESSAGE((v[i] == 0.0 || std::abs(v[i] - 1.0 / 0.75) < 1e-6), v[i]);
    CHECK(g[i] == v[i]);  // d(sum of x * mask) / dx = mask
    kept += v[i] != 0.0;
  }
  // 10^5 draws at p = 0.25: the kept fraction within 0.01 of 0.75 (seeded: the same values every run).
  CHECK(std::abs(double(kept) / v.size() - 0.75) < 0.01);
  manual_seed(11);
  std::vector<double> again = nn::functional::dropout(x.detach(), 0.25, true).to(Device::cpu()).to_vector<double>();
  CHECK(again == v);
}

TEST_CASE("MultiheadAttention and the Transformer layers on the GPU equal the CPU: outputs, weights and gradients") {
  REQUIRE_DEVICE();
  manual_seed(5);
  nn::TransformerDecoder dec(nn::TransformerDecoderLayer(nn::TransformerDecoderLayerOptions(8, 2)
                                                             .dim_feedforward(16)
                                                             .dropout(0.0)
                                                             .activation("gelu")
                                                             .batch_first(true)
                                                             .norm_first(true)),
                             2, nn::LayerNorm(nn::LayerNormOptions(8)));
  nn::MultiheadAttention attn(nn::MultiheadAttentionOptions(8, 2).kdim(6).add_bias_kv(true));
  const Tensor tgt = randn({3, 4, 8}), memory = randn({3, 5, 8});
  const Tensor q = randn({4, 3, 8}), k = randn({5, 3, 6}), v = randn({5, 3, 8});
  const Tensor causal = nn::generate_square_subsequent_mask(4);
  const Tensor pad = arange(15).view({3, 5}) >= 13.0;  // the last batch ignores its last two keys
  // Outputs, attention weights, then the gradients of the inputs and of every parameter, on the CPU.
  auto run = [&](Device d) {
    dec->to(d);
    attn->to(d);
    dec->zero_grad();
    attn->zero_grad();
    std::vector<Tensor> in;
    for (const Tensor& t : {tgt, memory, q, k, v}) in.push_back(t.detach().to(d).set_requires_grad());
    Tensor y = dec(in[0], in[1], causal.to(d), Tensor(), Tensor(), pad.to(d));
    auto [o, w] = attn(in[2], in[3], in[4], pad.to(d), true, Tensor(), false);
    (sum(y * y) + sum(o * o) + sum(w * w)).backward();
    std::vector<Tensor> out{y.cpu(), o.cpu(), w.cpu()};
    for (const Tensor& t : in) out.push_back(t.grad().cpu());
    for (const Tensor& p : dec->parameters()) out.push_back(p.grad().cpu());
    for (const Tensor& p : attn->parameters()) out.push_back(p.grad().cpu());
    return out;
  };
  const std::vector<Tensor> cpu = run(Device::cpu()), gpu = run(Device::cuda(0));
  REQUIRE(cpu.size() == gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("tensor ", i, " ", cpu[i].shape());
    CHECK(internal::allclose(gpu[i], cpu[i], 1e-3, 1e-4));
  }
}

// The parity layers on the GPU: most are composed there from the core kernels (interpolate from
// index_select where the CPU has a fused resampling kernel; the transposed, 1d and 3d convolutions,
// the pooling family, padding, folds), GroupNorm and scatter have kernels of their own. Each case runs
// on both devices from the same leaves; values and the gradients of sum(out * g) must agree.
TEST_CASE("the parity layers on the GPU equal the CPU: interpolate, GroupNorm, convolutions, pooling, padding, folds") {
  REQUIRE_DEVICE();
  namespace F = nn::functional;
  using V = std::vector<int64_t>;
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  struct Case {
    const char* name;
    std::vector<Shape> shapes;
    Fn f;
  };
  auto interp = [](F::InterpolateFuncOptions o) { return Fn([o](const std::vector<Tensor>& v) { return F::interpolate(v[0], o); }); };
  const std::vector<Case> cases = {
      {"interpolate bilinear", {{2, 3, 5, 6}}, interp(F::InterpolateFuncOptions().size(V{9, 4}).mode(nn::kBilinear).align_corners(false))},
      {"interpolate bicubic antialias", {{2, 3, 9, 8}}, interp(F::InterpolateFuncOptions().size(V{4, 5}).mode(nn::kBicubic).antialias(true))},
      {"interpolate nearest", {{2, 3, 5, 6}}, interp(F::InterpolateFuncOptions().scale_factor(std::vector<double>{2, 1.5}).mode(nn::kNearest))},
      {"interpolate trilinear", {{1, 2, 3, 4, 5}}, interp(F::InterpolateFuncOptions().size(V{5, 3, 7}).mode(nn::kTrilinear).align_corners(true))},
      {"interpolate area", {{2, 3, 11}}, interp(F::InterpolateFuncOptions().size(V{4}).mode(nn::kArea))},
      {"group_norm", {{4, 6, 5, 5}, {6}, {6}}, [](const std::vector<Tensor>& v) { return F::group_norm(v[0], 3, v[1], v[2]); }},
      {"conv_transpose2d", {{2, 4, 5, 5}, {4, 3, 4, 4}, {3}},
       [](const std::vector<Tensor>& v) { return F::conv_transpose2d(v[0], v[1], v[2], 2, 1); }},
      {"conv1d", {{2, 4, 20}, {6, 4, 3}, {6}}, [](const std::vector<Tensor>& v) { return F::conv1d(v[0], v[1], v[2], 2, 1); }},
      {"conv3d", {{1, 2, 5, 6, 4}, {3, 2, 3, 3, 3}, {3}}, [](const std::vector<Tensor>& v) { return F::conv3d(v[0], v[1], v[2], 1, 1); }},
      {"max_pool3d", {{2, 3, 6, 5, 6}}, [](const std::vector<Tensor>& v) { return F::max_pool3d(v[0], nn::MaxPool3dOptions(3).stride(2).padding(1)); }},
      {"avg_pool1d", {{2, 3, 11}}, [](const std::vector<Tensor>& v) { return F::avg_pool1d(v[0], nn::AvgPool1dOptions(3).stride(2).padding(1)); }},
      {"adaptive_max_pool2d", {{2, 3, 7, 9}}, [](const std::vector<Tensor>& v) { return F::adaptive_max_pool2d(v[0], nn::AdaptiveMaxPool2dOptions({3, 4})); }},
      {"lp_pool2d", {{2, 3, 6, 6}}, [](const std::vector<Tensor>& v) { return F::lp_pool2d(v[0], nn::LPPool2dOptions(2, 2)); }},
      {"pad reflect", {{2, 3, 5, 6}}, [](const std::vector<Tensor>& v) { return F::pad(v[0], F::PadFuncOptions({1, 2, 2, 1}).mode(nn::kReflect)); }},
      {"pad circular", {{2, 3, 5}}, [](const std::vector<Tensor>& v) { return F::pad(v[0], F::PadFuncOptions({2, 1}).mode(nn::kCircular)); }},
      {"pixel_shuffle", {{2, 8, 3, 3}}, [](const std::vector<Tensor>& v) { return F::pixel_shuffle(v[0], F::PixelShuffleFuncOptions(2)); }},
      {"unfold", {{2, 3, 6, 5}}, [](const std::vector<Tensor>& v) { return F::unfold(v[0], F::UnfoldFuncOptions({2, 3}).padding(1).stride(2)); }},
      {"fold", {{2, 12, 20}}, [](const std::vector<Tensor>& v) { return F::fold(v[0], F::FoldFuncOptions({5, 6}, {2, 2}).stride(1).padding(0)); }},
  };
  const Device gpu = Device::cuda(0);
  for (const Case& c : cases) {
    INFO(c.name);
    manual_seed(7);
    std::vector<Tensor> leaves;
    for (const Shape& s : c.shapes) leaves.push_back(randn(s));
    auto run = [&](Device d, std::vector<Tensor>& on) {
      on.clear();
      for (const Tensor& t : leaves) on.push_back(t.detach().to(d).set_requires_grad());
      Tensor y = c.f(on);
      manual_seed(8);
      sum(y * randn(y.shape()).to(d)).backward();
      return y;
    };
    std::vector<Tensor> cpu, dev;
    Tensor y_cpu = run(Device::cpu(), cpu), y_gpu = run(gpu, dev);
    CHECK(y_gpu.device() == gpu);
    REQUIRE(y_gpu.shape() == y_cpu.shape());
    CHECK(internal::allclose(y_gpu.cpu(), y_cpu, 1e-4, 1e-5));
    for (size_t i = 0; i < cpu.size(); ++i) {
      INFO("leaf ", i);
      CHECK(internal::allclose(dev[i].grad().cpu(), cpu[i].grad(), 1e-4, 1e-5));
    }
  }
}
