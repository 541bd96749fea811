// MapDataset: the transform on each example, or the collation on each batch.
#include "data/map_dataset.h"

namespace lockstep::data {

namespace {

// A collation ends a pipeline (LibTorch: the next transform would receive a batch, not examples).
void check_source(const std::shared_ptr<Dataset>& source, const char* what) {
  LOCKSTEP_CHECK(source, "MapDataset: the source dataset is null");
  auto* mapped = dynamic_cast<const MapDataset*>(source.get());
  LOCKSTEP_CHECK(!mapped || !mapped->collates(), "MapDataset: cannot map ", what,
                 " on top of a collation (Stack<>, Collate<>): map example transforms first and the collation last");
}

}  // namespace

MapDataset::MapDataset(std::shared_ptr<Dataset> source, std::shared_ptr<const transforms::Transform<>> transform)
    : source_(std::move(source)), transform_(std::move(transform)) {
  check_source(source_, "a transform");
  LOCKSTEP_CHECK(transform_, "MapDataset: the transform is null");
}

MapDataset::MapDataset(std::shared_ptr<Dataset> source, std::shared_ptr<const transforms::Collation<>> collation)
    : source_(std::move(source)), collation_(std::move(collation)) {
  check_source(source_, "a second collation");
  LOCKSTEP_CHECK(collation_, "MapDataset: the collation is null");
  stacks_ = dynamic_cast<const transforms::Stack<>*>(collation_.get()) != nullptr;
}

Example MapDataset::get(int64_t index) const {
  Example e = source_->get(index);
  return transform_ ? transform_->apply(std::move(e)) : e;
}

std::vector<Example> MapDataset::get_examples(const std::vector<int64_t>& indices) const {
  std::vector<Example> examples = source_->get_examples(indices);
  if (transform_) {
    for (Example& e : examples) e = transform_->apply(std::move(e));
  }
  return examples;
}

Batch MapDataset::get_batch(const std::vector<int64_t>& indices) const {
  if (transform_) return Dataset::get_batch(indices);  // stacks get_examples
  if (stacks_) return source_->get_batch(indices);
  std::vector<Example> examples = source_->get_examples(indices);
  if (examples.empty()) return {};  // a stream's end; the collation never sees an empty batch
  return collation_->apply_batch(std::move(examples));
}

}  // namespace lockstep::data
