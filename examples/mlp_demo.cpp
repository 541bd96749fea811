// mlp_demo: single-process training, the way a PyTorch user writes it. A small MLP learns to
// classify points from four Gaussian blobs; the loss falls and the accuracy rises each epoch.
#include <cstdio>

#include "nn/api.h"
#include "optim/api.h"

using namespace lockstep;

int main() {
  manual_seed(0);
  const int64_t n = 1024, batch = 64;
  // Four classes at the corners of a square, each a blob of radius ~0.7.
  Tensor labels = randint(0, 4, {n});
  Tensor corners = tensor({-2.f, -2.f, 2.f, -2.f, -2.f, 2.f, 2.f, 2.f}, {4, 2});
  Tensor x = add(index_select(corners, labels), mul(randn({n, 2}), 0.7));

  auto model = nn::Sequential(nn::Linear(2, 32), nn::ReLU(),
                                                nn::Linear(32, 4));
  optim::SGD optimizer(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss criterion;

  for (int epoch = 0; epoch < 10; ++epoch) {
    model->train();
    Tensor perm = randperm(n);
    double total = 0;
    for (int64_t i = 0; i < n; i += batch) {
      Tensor idx = index_select(perm, arange(i, std::min(i + batch, n)));
      Tensor inputs = index_select(x, idx), targets = index_select(labels, idx);
      optimizer.zero_grad();
      Tensor loss = criterion(model(inputs), targets);
      loss.backward();
      optimizer.step();
      total += loss.item<float>() * inputs.size(0);
    }
    NoGradGuard no_grad;
    model->eval();
    int64_t correct = model(x).argmax(1).eq(labels).sum().item<int64_t>();
    std::printf("epoch %d loss %.4f accuracy %.3f\n", epoch, total / n, double(correct) / n);
  }
  return 0;
}
