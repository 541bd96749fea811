// Programs written as for LibTorch, built against <lockstep/torch.h>: a LibTorch-style CNN module with
// default-constructed and option-constructed members trained by torch::optim::SGD on a torch::data
// pipeline (map(Normalize<>).map(Stack<>), make_data_loader, batch.data / batch.target), evaluated under
// NoGradGuard with torch::nll_loss(..., torch::Reduction::Sum); a polynomial regression by the ATen
// spellings; torch::save / torch::load round trips; MNIST-format files through torch::data::datasets::MNIST.
#include <lockstep/torch.h>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "tests/util/test_util.h"

namespace {

struct Net : torch::nn::Module {
  Net()
      : conv1(torch::nn::Conv2dOptions(1, 4, /*kernel_size=*/3)),
        conv2(torch::nn::Conv2dOptions(4, 8, /*kernel_size=*/3)),
        fc1(8 * 1 * 1, 16),
        fc2(16, 2) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));  // [N, 4, 4, 4]
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));  // [N, 8, 1, 1]
    x = x.view({-1, 8});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, /*p=*/0.1, /*training=*/is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, /*dim=*/1);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};

// 10x10 images of class 0 (a bright left half) or 1 (a bright right half), with noise.
torch::data::datasets::Dataset halves(int64_t n) {
  torch::Tensor x = torch::randn({n, 1, 10, 10}) * 0.3;
  torch::Tensor y = torch::randint(0, 2, {n});
  auto left = x.narrow(3, 0, 5), right = x.narrow(3, 5, 5);
  for (int64_t i = 0; i < n; ++i) {
    auto half = (y.select(0, i).item<int64_t>() == 0 ? left : right).select(0, i);
    half.add_(torch::ones({1, 10, 5}));
  }
  return torch::data::datasets::Dataset(std::make_shared<lockstep::data::TensorDataset>(x, y));
}

template <typename DataLoader>
double evaluate(Net& model, DataLoader& loader, size_t n) {
  torch::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  double loss = 0;
  for (const auto& batch : loader) {
    auto output = model.forward(batch.data);
    loss += torch::nll_loss(output, batch.target, /*weight=*/{}, torch::Reduction::Sum).template item<float>();
    correct += output.argmax(1).eq(batch.target).sum().template item<int64_t>();
  }
  CHECK(std::isfinite(loss));
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace

TEST_CASE("a LibTorch-style CNN trains on a torch::data pipeline through <lockstep/torch.h>") {
  torch::manual_seed(1);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  device = torch::Device(torch::kCPU);
  Net model;
  model.to(device);
  auto train_dataset = halves(256).map(torch::data::transforms::Normalize<>(0.5, 0.5)).map(torch::data::transforms::Stack<>());
  const size_t train_size = train_dataset.size().value();
  CHECK(train_size == 256);
  auto train_loader = torch::data::make_data_loader(std::move(train_dataset),
                                                    torch::data::DataLoaderOptions().batch_size(32).workers(1));
  auto test_dataset = halves(128).map(torch::data::transforms::Normalize<>(0.5, 0.5)).map(torch::data::transforms::Stack<>());
  const size_t test_size = test_dataset.size().value();
  auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(test_dataset), 64);
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  const double before = evaluate(model, *test_loader, test_size);
  for (int epoch = 1; epoch <= 4; ++epoch) {
    model.train();
    for (auto& batch : *train_loader) {
      auto data = batch.data.to(device), targets = batch.target.to(device);
      optimizer.zero_grad();
      auto loss = torch::nll_loss(model.forward(data), targets);
      AT_ASSERT(!std::isnan(loss.template item<float>()));
      loss.backward();
      optimizer.step();
    }
  }
  const double after = evaluate(model, *test_loader, test_size);
  INFO("accuracy before ", before, ", after ", after);
  CHECK(after > 0.9);

  // torch::save / torch::load of the module and the optimizer restore them exactly.
  const auto dir = std::filesystem::temp_directory_path() / ("torch_compat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  torch::save(model, (dir / "model.pt").string());
  torch::save(optimizer, (dir / "optimizer.pt").string());
  Net copy;
  torch::optim::SGD copy_optimizer(copy.parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  torch::load(copy, (dir / "model.pt").string());
  torch::load(copy_optimizer, (dir / "optimizer.pt").string());
  CHECK(evaluate(copy, *test_loader, test_size) == after);
  torch::Tensor t = torch::arange(6).view({2, 3}), u;
  torch::save(t, (dir / "t.pt").string());
  torch::load(u, (dir / "t.pt").string());
  CHECK(u.eq(t).sum().item<int64_t>() == 6);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a polynomial regression in ATen's spellings converges (torch::smooth_l1_loss, optim::SGD(params, lr))") {
  torch::manual_seed(2);
  auto W_target = torch::randn({4, 1}) * 5;
  auto b_target = torch::randn({1}) * 5;
  auto fc = torch::nn::Linear(W_target.size(0), 1);
  torch::optim::SGD optim(fc->parameters(), .1);
  float loss = 0;
  int64_t batch_idx = 0;
  while (++batch_idx < 20000) {
    auto random = torch::randn({32}).unsqueeze(1);
    std::vector<torch::Tensor> xs;
    for (int64_t i = 0; i < 4; ++i) xs.push_back(random.pow(static_cast<double>(i + 1)));
    auto batch_x = torch::cat(xs, 1);
    auto batch_y = batch_x.matmul(W_target) + b_target.item<float>();
    optim.zero_grad();
    auto output = torch::smooth_l1_loss(fc(batch_x), batch_y);
    loss = output.item<float>();
    output.backward();
    optim.step();
    if (loss < 1e-3f) break;
  }
  INFO("loss ", loss, " after ", batch_idx, " batches");
  CHECK(loss < 1e-3f);
  CHECK(torch::allclose(fc->weight.view({-1}), W_target.view({-1}), 0, 0.1));
}

TEST_CASE("torch:: names: Reduction codes, requires_grad options, str, MNIST-format files") {
  CHECK(torch::nll_loss(torch::log_softmax(torch::zeros({2, 4}), 1), torch::zeros({2}, torch::kInt64), {},
                        torch::Reduction::Sum).item<double>() == doctest::Approx(2 * std::log(4.0)));
  CHECK(torch::nll_loss(torch::log_softmax(torch::zeros({2, 4}), 1), torch::zeros({2}, torch::kInt64), {},
                        torch::Reduction::None).sizes() == torch::Shape{2});
  CHECK(lockstep::testing::contains(lockstep::testing::error_of([] { torch::to_reduction(5); }), "got 5"));
  auto x = torch::ones({2, 2}, torch::requires_grad());
  CHECK(x.requires_grad());
  CHECK(torch::str("dcgan-sample-", 3, ".pt") == "dcgan-sample-3.pt");
  // Tensor's LibTorch spellings: t[i], untyped item() (a Scalar), mm, all / any, uniform_ / normal_.
  auto w = torch::tensor({1.0, 2.0, 3.0, 4.0}, torch::kFloat64).view({2, 2});
  CHECK(w[1][0].item<double>() == 3.0);
  torch::Scalar s = w[0][1].item();
  CHECK(s.isFloatingPoint());
  CHECK(s.toDouble() == 2.0);
  CHECK(torch::arange(5).sum().item().isIntegral());
  torch::Scalar five = 5, half = 0.5f;  // any integer or floating-point number converts, as c10::Scalar
  CHECK((five.isIntegral() && five.toLong() == 5 && half.isFloatingPoint() && half.toDouble() == 0.5));
  CHECK((w.mm(w) + w[0][0].item()).view({-1}).to_vector<double>() == std::vector<double>{8, 11, 16, 23});
  CHECK(lockstep::testing::contains(lockstep::testing::error_of([&] { w.view({-1}).mm(w); }), "mm: expected two 2-D"));
  CHECK(w.gt(0).all().item<bool>());
  CHECK(!w.gt(1).all().item<bool>());
  CHECK(w.gt(3).any().item<bool>());
  CHECK(!w.gt(4).any().item<bool>());
  auto u = torch::empty(1000).uniform_(0.8, 1.0);
  CHECK(u.min().item<float>() >= 0.8f);
  CHECK(u.max().item<float>() < 1.0f);
  CHECK(u.mean().item<double>() == doctest::Approx(0.9).epsilon(0.02));
  auto g = torch::zeros({4000}, torch::kFloat64).normal_(2.0, 0.5);
  CHECK(g.mean().item<double>() == doctest::Approx(2.0).epsilon(0.05));
  CHECK(lockstep::testing::contains(lockstep::testing::error_of([] { torch::empty(3).uniform_(1, 0); }), "uniform_: expects from <= to"));
  // Fashion-MNIST from Debian's dataset-fashion-mnist package (tools/bazel installs it): LibTorch's MNIST layout.
  auto test = torch::data::datasets::MNIST(lockstep::data::kFashionMnistDir, torch::data::datasets::MNIST::Mode::kTest);
  REQUIRE(test.size().value() == 10000);
  auto example = test.get(0);
  CHECK(example.data.sizes() == torch::Shape{1, 28, 28});
  CHECK(example.target.dtype() == torch::kInt64);
  CHECK(example.data.max().item<float>() <= 1.0f);
}
