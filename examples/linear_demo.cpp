// linear_demo: the first documented program (single node, several GPUs with DDP), in lockstep.
//
//   PyTorch                                         lockstep
//   init_process_group(backend="nccl")              dist::init_process_group({.backend = "auto"})
//   RandomDataset(5, 90); DistributedSampler        RandomDataset(5, 90); data::DistributedSampler
//   DataLoader(dataset, batch_size=30, sampler)     data::DataLoader(dataset, {.batch_size = 30, .sampler})
//   model.to(device); DDP(model, device_ids=[r])    model->to(device); dist::DistributedDataParallel(model, ...)
//
// Run on 2 ranks:  launch --nproc_per_node=2 bazel-bin/examples/linear_demo  (tools/bazel run //examples:demo)
// Beyond the original (which only runs forward), every batch also takes an SGD step on a small
// regression loss, and the end shows that every rank holds the same parameters.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "data/api.h"
#include "distributed/api.h"
#include "distributed/ddp.h"
#include "nn/api.h"
#include "optim/api.h"
#include "tensor/cuda/cuda.h"

using namespace lockstep;

// The seeds' RandomDataset: `length` rows of `size` standard-normal features.
struct RandomDataset : data::Dataset {
  Tensor data;
  RandomDataset(int64_t size, int64_t length) : data(randn({length, size})) {}
  int64_t size() const override { return data.size(0); }
  data::Example get(int64_t i) const override { return {data::row(data, i), scalar_tensor(0, kInt64)}; }
};

// The seeds' Model: one Linear whose forward reports the sizes it sees.
struct ModelImpl : nn::Module {
  nn::Linear fc{nullptr};
  ModelImpl(int64_t input_size, int64_t output_size) : Module("Model") {
    fc = register_module("fc", nn::Linear(input_size, output_size));
  }
  Tensor forward(const Tensor& input) {
    Tensor output = fc->forward(input);
    std::cout << "  In Model: input size " << input.shape() << " output size " << output.shape() << std::endl;
    return output;
  }
};
LOCKSTEP_MODULE(Model);

int main(int argc, char** argv) {
  CLI::App app{"lockstep's version of the documented single-node multi-GPU DDP program"};
  double timeout_s = 0;
  std::string backend = "auto";
  app.add_option("--timeout", timeout_s, "process-group timeout in seconds (default: LOCKSTEP_TIMEOUT or PyTorch's)");
  app.add_option("--backend", backend, "gloo, nccl, mpi (under mpirun) or auto (nccl when a GPU is visible)");
  CLI11_PARSE(app, argc, argv);
  try {
    const int64_t input_size = 5, output_size = 2, batch_size = 30, data_size = 90;

    // 1) Initialise: env:// from the launcher's MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK.
    dist::InitOptions init;
    init.backend = backend;
    if (timeout_s > 0) init.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    dist::init_process_group(init);
    const int rank = dist::get_rank(), world = dist::get_world_size(), local_rank = dist::get_local_rank();

    // 2) One GPU per process where there are GPUs, else the CPU.
    Device device = Device::cpu();
    if (dist::get_backend() == "nccl") {
      cuda::set_device(local_rank);
      device = Device::cuda(local_rank);
    }
    if (rank == 0)
      std::printf("lockstep: %d rank(s), backend %s, device %s\n", world, dist::get_backend().c_str(),
                  device.is_cuda() ? "cuda (one GPU per rank)" : "cpu");

    manual_seed(0);  // the same data on every rank; DistributedSampler gives each its shard
    auto dataset = std::make_shared<RandomDataset>(input_size, data_size);
    // 3) DistributedSampler shards the dataset across ranks.
    data::DataLoader rand_loader(dataset, {.batch_size = batch_size,
                                           .sampler = std::make_shared<data::DistributedSampler>(*dataset),
                                           .device = device});

    manual_seed(1 + rank);  // different initial weights per rank: DDP broadcasts rank 0's
    Model model(input_size, output_size);
    // 4) Move the model to its device before wrapping it.
    model->to(device);
    std::shared_ptr<nn::Module> net = model;
    if (world > 1) {
      if (rank == 0) std::printf("Let's use %d processes!\n", world);
      // 5) Wrap it.
      dist::DDPOptions opts;
      if (device.is_cuda()) opts.device_ids = {local_rank};
      net = std::make_shared<dist::DistributedDataParallel>(model.ptr(), opts);
    }
    optim::SGD optimizer(net->parameters(), optim::SGDOptions(0.1));

    for (auto& batch : rand_loader) {
      Tensor input_var = batch.input;
      Tensor output = (*net)(input_var);
      std::cout << "Outside: input size " << input_var.shape() << " output_size " << output.shape() << std::endl;
      optimizer.zero_grad();
      nn::functional::mse_loss(output, zeros_like(output)).backward();  // gradients averaged across ranks
      optimizer.step();
    }

    // Every replica stepped in lockstep: the parameter checksums agree.
    Tensor checksum = model->fc->weight.detach().sum().to(kFloat64).to(device);
    Tensor max_sum = checksum.clone(), min_sum = checksum.clone();
    dist::all_reduce(max_sum, dist::ReduceOp::MAX);
    dist::all_reduce(min_sum, dist::ReduceOp::MIN);
    if (rank == 0)
      std::printf("parameters identical on all %d ranks: %s (weight sum %.6f)\n", world,
                  max_sum.item<double>() == min_sum.item<double>() ? "yes" : "NO", checksum.item<double>());
    dist::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linear_demo: %s\n", e.what());
    return 1;
  }
}
