// What the image-classification examples (cnn_fashion, resnet) share around their training loop: the
// Fashion-MNIST images as [N, 1, 28, 28], sums over the ranks, the global test accuracy, and the
// --bench-steps timing loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/api.h"
#include "examples/common/sharding.h"
#include "nn/module.h"

namespace lockstep::examples {

// The first `limit` images (all when limit < 0) of a Fashion-MNIST split as [N, 1, 28, 28] (normalized)
// with their labels; `flag` names the option that set the limit in the error for one out of range.
std::shared_ptr<data::TensorDataset> fashion_mnist_images(const std::string& dir, bool train, int64_t limit,
                                                          const std::string& flag);

// `v` summed over the ranks (an all-reduce on `device`).
std::vector<double> all_reduce_sum(std::vector<double> v, Device device);

// The global accuracy over a test set of `n` samples sharded by a DistributedSampler without shuffle:
// each rank counts its shard without the samples the sampler repeats to pad the shards, and the counts
// are all-reduced. Runs in eval mode without gradients, then puts the model back in training mode.
double evaluate_accuracy(nn::Module& model, data::DataLoader& loader, int64_t n, Device device);

// Times `steps` training steps (cross-entropy) on the loader's batches after 5 untimed ones, in any
// --shard mode (zero_grad, forward, backward and step through `sharding`, as training does), and rank 0
// prints the median step and its phases (under DDP, the wait for the all-reduce split out of backward)
// and the process CPU time per step (every thread; steadier than wall time on a loaded machine), then
// `step_ms MEDIAN`, the line bench/twin_bench.py reads. `autocast_bf16`: forward and loss under
// autocast in bfloat16 (--dtype bfloat16).
void bench_steps(Sharding& sharding, data::DataLoader& loader, Device device, int64_t steps, int64_t batch_size,
                 bool autocast_bf16 = false);

}  // namespace lockstep::examples
