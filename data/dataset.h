// Dataset: indexed examples, as torch.utils.data.Dataset. A dataset is a size and a get(i); the
// DataLoader reads it through get_batch, which by default stacks get_examples (one get(i) per index)
// and which a dataset backed by whole tensors overrides with one gather per tensor (TensorDataset).
//
// A user-defined dataset is a few lines:
//   struct RandomDataset : Dataset {
//     Tensor data;  // [length, size]
//     RandomDataset(int64_t size, int64_t length) : data(randn({length, size})) {}
//     int64_t size() const override { return data.size(0); }
//     Example get(int64_t i) const override { return {row(data, i), scalar_tensor(0, kInt64)}; }
//   };
// With num_workers > 0 the DataLoader calls get/get_examples/get_batch from several threads at once:
// they are const and must not mutate shared state.
//
// LibTorch's names: Example is LibTorch's Example<> (with .input for its .data: lockstep's Example is
// not a template, so that `Example get(i)` and `auto& [input, target]` keep working), Batch is the
// stacked Example<> its Stack<> makes. map() applies a transform (data/transforms.h) and returns a
// MapDataset (data/map_dataset.h). A stream whose length is only known once read (ChunkDataset) has
// size() == kUnknownSize, ends an epoch by returning fewer examples than asked, and is restarted by
// reset() (LibTorch's StatefulDataset), which the DataLoader calls at the start of every epoch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::data {

// One example: an input and its target (for classification an int64 scalar, shape []).
struct Example {
  Tensor input;
  Tensor target;
};

// A collated batch: inputs [B, ...] and targets [B, ...], example i in row i. A Batch with undefined
// tensors has no examples: what a stream returns past the end of its epoch.
struct Batch {
  Tensor input;
  Tensor target;
};

// size() of a stream whose length is learnt by reading it (LibTorch's size() == nullopt).
inline constexpr int64_t kUnknownSize = -1;

class MapDataset;

// Datasets are shared handles (the DataLoader and map() hold them by std::shared_ptr);
// enable_shared_from_this is what lets map() keep its source alive.
class Dataset : public std::enable_shared_from_this<Dataset> {
 public:
  virtual ~Dataset() = default;
  // The number of examples, or kUnknownSize for a stream.
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices`, in order: LibTorch's get_batch, before collation. By default one get()
  // per index, each checked against size(). A stream returns fewer, or none, past its end.
  virtual std::vector<Example> get_examples(const std::vector<int64_t>& indices) const;
  // The examples at `indices` (non-empty), stacked along a new first dimension in that order (Stack<>);
  // an empty Batch when get_examples returns none.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
  // Starts a new epoch (LibTorch's StatefulDataset::reset); a no-op for indexed datasets.
  virtual void reset() {}
  // Makes internal sampling a function of the epoch (ChunkDataset's samplers); a no-op by default.
  virtual void set_epoch(int64_t /*epoch*/) {}

  // A dataset whose examples (a Transform, e.g. Normalize<>) or batches (a Collation, e.g. Stack<>)
  // pass through `transform`, as LibTorch's Dataset::map. This dataset must be held by a
  // std::shared_ptr (ds->map(...)), which the MapDataset shares. Defined in data/map_dataset.h.
  template <typename TransformType>
  MapDataset map(TransformType transform);
};

// t[i]: row i of t [R, ...] as a tensor of shape [...], sharing t's storage (no copy).
Tensor row(const Tensor& t, int64_t i);

// Stacks examples into a batch (torch's default_collate for (input, target) pairs); transforms::Stack<>
// is this under LibTorch's name.
Batch collate(const std::vector<Example>& examples);

}  // namespace lockstep::data
