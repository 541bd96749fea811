// MapDataset: a dataset whose examples, or whose batches, pass through a transform, as LibTorch's
// datasets::MapDataset. Dataset::map makes one:
//
//   auto ds = std::make_shared<TensorDataset>(images, labels)   // images [N, C, H, W]
//                 ->map(transforms::Normalize<>({0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}))
//                 .map(transforms::Stack<>());
//   DataLoader loader(std::move(ds), {.batch_size = 64, .sampler = std::make_shared<DistributedSampler>(n)});
//
// A MapDataset holds its source by std::shared_ptr and is itself cheap to copy (two handles), so maps
// chain by value and a DataLoader takes one by value. It indexes exactly as its source does (same
// size(), same indices), so any sampler, DistributedSampler included, and any number of DataLoader
// workers work unchanged; the transform runs in whichever worker makes the batch (transforms are
// const and thread-safe, data/transforms.h). reset() and set_epoch() pass through to the source, so
// a mapped ChunkDataset still restarts each epoch.
//
// With a Transform: get(i) is the transformed source example, and a batch stacks transformed examples.
// With a Collation: examples pass unchanged and a batch is the collation of the source's examples;
// Stack<> is the source's own get_batch (the same values, by the Dataset contract, and a TensorDataset
// keeps its one-gather batches). A collation is the last thing mapped: mapping anything on top of one
// is an error, as LibTorch's types make it a compile error.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/check.h"
#include "data/dataset.h"
#include "data/transforms.h"

namespace lockstep::data {

class MapDataset : public Dataset {
 public:
  MapDataset(std::shared_ptr<Dataset> source, std::shared_ptr<const transforms::Transform<>> transform);
  MapDataset(std::shared_ptr<Dataset> source, std::shared_ptr<const transforms::Collation<>> collation);

  int64_t size() const override { return source_->size(); }
  Example get(int64_t index) const override;
  std::vector<Example> get_examples(const std::vector<int64_t>& indices) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  void reset() override { source_->reset(); }
  void set_epoch(int64_t epoch) override { source_->set_epoch(epoch); }

  // Maps on top of a copy of this one (hides Dataset::map, so a MapDataset held by value chains).
  template <typename TransformType>
  MapDataset map(TransformType transform) const;

  // The source dataset (LibTorch's dataset()).
  const std::shared_ptr<Dataset>& dataset() const { return source_; }
  // Whether this map is a collation (then nothing may be mapped on top).
  bool collates() const { return collation_ != nullptr; }

 private:
  std::shared_ptr<Dataset> source_;
  std::shared_ptr<const transforms::Transform<>> transform_;  // one of these two is set
  std::shared_ptr<const transforms::Collation<>> collation_;
  bool stacks_ = false;  // collation_ is Stack<>: batches come from source_->get_batch
};

namespace detail {

template <typename>
inline constexpr bool kNotATransform = false;

template <typename TransformType>
MapDataset make_map(std::shared_ptr<Dataset> source, TransformType transform) {
  if constexpr (std::is_base_of_v<transforms::Transform<>, TransformType>) {
    return MapDataset(std::move(source), std::make_shared<const TransformType>(std::move(transform)));
  } else if constexpr (std::is_base_of_v<transforms::Collation<>, TransformType>) {
    return MapDataset(std::move(source), std::make_shared<const TransformType>(std::move(transform)));
  } else {
    static_assert(kNotATransform<TransformType>,
                  "map: expected a transforms::Transform<> (Normalize<>, Lambda<>, TensorLambda<>, ...) or a "
                  "transforms::Collation<> (Stack<>, Collate<>)");
  }
}

}  // namespace detail

template <typename TransformType>
MapDataset Dataset::map(TransformType transform) {
  std::shared_ptr<Dataset> self = weak_from_this().lock();
  LOCKSTEP_CHECK(self, "Dataset::map: the dataset is not held by a std::shared_ptr, which the MapDataset needs to "
                       "share it; make it with std::make_shared and call ds->map(...)");
  return detail::make_map(std::move(self), std::move(transform));
}

template <typename TransformType>
MapDataset MapDataset::map(TransformType transform) const {
  return detail::make_map(std::make_shared<MapDataset>(*this), std::move(transform));
}

}  // namespace lockstep::data
