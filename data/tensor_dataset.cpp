// TensorDataset: views for single examples, index_select for batches.
#include "data/tensor_dataset.h"

#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::data {

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  LOCKSTEP_CHECK(inputs_.defined() && targets_.defined(), "TensorDataset: inputs and targets must be defined");
  LOCKSTEP_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1 && inputs_.size(0) == targets_.size(0),
                 "TensorDataset: inputs ", inputs_.shape(), " and targets ", targets_.shape(),
                 " must have the same first dimension (the number of examples)");
}

Example TensorDataset::get(int64_t index) const { return {row(inputs_, index), row(targets_, index)}; }

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  // The index is built on the host and moved next to each tensor (a no-op on the CPU).
  Tensor idx = tensor(indices, {static_cast<int64_t>(indices.size())});
  return {internal::index_select(inputs_, internal::to_device(idx, inputs_.device())),
          internal::index_select(targets_, internal::to_device(idx, targets_.device()))};
}

}  // namespace lockstep::data
