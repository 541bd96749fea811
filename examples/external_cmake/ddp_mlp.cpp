// ddp_mlp: data-parallel training written against an installed lockstep, as a user's own project
// builds it (CMakeLists.txt beside it, or pkg-config). An MLP learns to classify points of four
// Gaussian blobs; every rank trains on its shard through DistributedDataParallel over gloo on the CPU.
//
//   lockstep-run --nproc_per_node=2 ./ddp_mlp
#include <cstdio>
#include <exception>
#include <memory>

#include "lockstep.h"  // also <lockstep.h> once installed; "lockstep.h" under Bazel too

using namespace lockstep;

int main() {
  try {
    dist::init_process_group({.backend = "gloo"});  // env:// from lockstep-run (or torchrun's variables)
    const int rank = dist::get_rank(), world = dist::get_world_size();

    // The same 1024 points on every rank (same seed); DistributedSampler gives each rank its shard.
    manual_seed(0);
    const int64_t n = 1024;
    Tensor labels = randint(0, 4, {n});
    Tensor corners = tensor({-2.f, -2.f, 2.f, -2.f, -2.f, 2.f, 2.f, 2.f}, {4, 2});
    Tensor x = index_select(corners, labels) + randn({n, 2}) * 0.7;  // x: [n, 2]
    auto dataset = std::make_shared<data::TensorDataset>(x, labels);
    auto sampler = std::make_shared<data::DistributedSampler>(*dataset);
    data::DataLoader loader(dataset, {.batch_size = 32, .sampler = sampler});

    manual_seed(1 + rank);  // different initial weights per rank: DDP broadcasts rank 0's
    nn::Sequential model(nn::Linear(2, 32), nn::ReLU(), nn::Linear(32, 4));
    dist::DistributedDataParallel ddp(model);
    optim::SGD optimizer(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    nn::CrossEntropyLoss criterion;

    double accuracy = 0;
    for (int epoch = 0; epoch < 5; ++epoch) {
      sampler->set_epoch(epoch);
      model->train();
      double loss_sum = 0;
      int64_t batches = 0;
      for (auto& [inputs, targets] : loader) {
        optimizer.zero_grad();
        Tensor loss = criterion(ddp(inputs), targets);
        loss.backward();  // gradients averaged across ranks while backward runs
        optimizer.step();
        loss_sum += loss.item<float>();
        ++batches;
      }
      NoGradGuard no_grad;
      model->eval();
      accuracy = model->forward(x).argmax(1).eq(labels).to(kFloat64).mean().item<double>();
      if (rank == 0) std::printf("epoch %d loss %.4f accuracy %.3f\n", epoch, loss_sum / batches, accuracy);
    }

    // Every replica stepped in lockstep: the parameter sums agree on all ranks.
    Tensor sum = zeros({1}, kFloat64);
    for (const Tensor& p : model->parameters()) sum = sum + p.detach().sum().to(kFloat64);
    Tensor max_sum = sum.clone(), min_sum = sum.clone();
    dist::all_reduce(max_sum, dist::ReduceOp::MAX);
    dist::all_reduce(min_sum, dist::ReduceOp::MIN);
    const bool same = max_sum.item<double>() == min_sum.item<double>();
    if (rank == 0)
      std::printf("ddp_mlp: %d ranks, parameters identical: %s, accuracy %.3f\n", world, same ? "yes" : "NO",
                  accuracy);
    dist::destroy_process_group();
    return same && accuracy > 0.9 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_mlp: %s\n", e.what());
    return 1;
  }
}
