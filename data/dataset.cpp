// Dataset's default batch: one get() per index, then a stack per field.
#include "data/dataset.h"

#include "common/check.h"
#include "tensor/ops.h"

namespace lockstep::data {

Tensor row(const Tensor& t, int64_t i) {
  LOCKSTEP_CHECK(t.defined() && t.dim() >= 1, "row: expected a tensor with at least one dimension");
  LOCKSTEP_CHECK(i >= 0 && i < t.size(0), "row: index ", i, " is out of range for ", t.shape());
  return internal::select(t, 0, i);
}

Batch collate(const std::vector<Example>& examples) {
  LOCKSTEP_CHECK(!examples.empty(), "collate: expected at least one example");
  std::vector<Tensor> inputs, targets;
  inputs.reserve(examples.size());
  targets.reserve(examples.size());
  for (const Example& e : examples) {
    inputs.push_back(e.input);
    targets.push_back(e.target);
  }
  return {internal::stack(inputs), internal::stack(targets)};
}

std::vector<Example> Dataset::get_examples(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) {
    LOCKSTEP_CHECK(i >= 0 && (n == kUnknownSize || i < n), "Dataset: index ", i,
                   " is out of range for a dataset of ", n, " examples");
    examples.push_back(get(i));
  }
  return examples;
}

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Example> examples = get_examples(indices);
  if (examples.empty()) return {};
  return collate(examples);
}

}  // namespace lockstep::data
