// TensorDataset: a dataset held as two whole tensors, as torch.utils.data.TensorDataset. Example i
// is (inputs[i], targets[i]) as views; a batch is one index_select per tensor (a row memcpy each),
// never a per-example stack.
#pragma once

#include "data/dataset.h"

namespace lockstep::data {

class TensorDataset : public Dataset {
 public:
  // inputs [N, ...], targets [N, ...] (for classification int64 [N]); both shared, not copied.
  TensorDataset(Tensor inputs, Tensor targets);

  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
};

}  // namespace lockstep::data
