// Dataset: indexed examples, as torch.utils.data.Dataset. A dataset is a size and a get(i); the
// DataLoader reads it through get_batch, which by default stacks get(i) of each index and which a
// dataset backed by whole tensors overrides with one gather per tensor (TensorDataset).
//
// A user-defined dataset is a few lines:
//   struct RandomDataset : Dataset {
//     Tensor data;  // [length, size]
//     RandomDataset(int64_t size, int64_t length) : data(randn({length, size})) {}
//     int64_t size() const override { return data.size(0); }
//     Example get(int64_t i) const override { return {row(data, i), scalar_tensor(0, kInt64)}; }
//   };
// With num_workers > 0 the DataLoader calls get/get_batch from several threads at once: they are
// const and must not mutate shared state.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::data {

// One example: an input and its target (for classification an int64 scalar, shape []).
struct Example {
  Tensor input;
  Tensor target;
};

// A collated batch: inputs [B, ...] and targets [B, ...], example i in row i.
struct Batch {
  Tensor input;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices` (non-empty), stacked along a new first dimension in that order.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// t[i]: row i of t [R, ...] as a tensor of shape [...], sharing t's storage (no copy).
Tensor row(const Tensor& t, int64_t i);

// Stacks examples into a batch (torch's default_collate for (input, target) pairs).
Batch collate(const std::vector<Example>& examples);

}  // namespace lockstep::data
