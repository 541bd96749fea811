// Dataset transforms, as LibTorch's torch::data::transforms: what Dataset::map applies.
//
//   auto train = load_fashion_mnist(dir, true, /*normalize=*/false, /*flatten=*/false)
//                    ->map(transforms::Normalize<>(0.2860, 0.3530))
//                    .map(transforms::Stack<>());
//   DataLoader loader(std::move(train), {.batch_size = 64, .num_workers = 2});
//
// Two kinds, as in LibTorch:
//   Transform<>  one example in, one out (applied to each example): Lambda<>, TensorTransform<> (the
//                example's input alone) and its TensorLambda<> and Normalize<>;
//   Collation<>  a batch's examples in, the Batch out: Stack<> (stack each field; what lockstep's
//                DataLoader does when no collation is mapped) and Collate<> (a function of yours).
// Transforms come before the collation, as LibTorch's types require; MapDataset checks it.
//
// Differences from LibTorch, and why:
//   - apply / apply_batch / operator() are const: the DataLoader's workers share one dataset (LibTorch
//     copies it per worker), so a transform is called from several threads at once and must not
//     mutate itself. A TensorTransform<> of yours overrides `Tensor operator()(Tensor input) const`.
//   - lockstep's examples are (Tensor, Tensor) pairs (data::Example, .input for LibTorch's .data) and
//     its batches data::Batch. The template parameters are LibTorch's, kept so that Normalize<>,
//     Stack<>, Lambda<Example> and Collate<Example> read the same; other arguments do not compile.
#pragma once

#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace lockstep::data::transforms {

// One example in, one example out (LibTorch's Transform<Example<>, Example<>>).
template <typename Input = Example, typename Output = Input>
class Transform {
  static_assert(std::is_same_v<Input, Example> && std::is_same_v<Output, Example>,
                "lockstep's transforms map a data::Example to a data::Example");

 public:
  using InputType = Input;
  using OutputType = Output;
  virtual ~Transform() = default;
  virtual Output apply(Input input) const = 0;
};

// A batch's examples in, the batch out (LibTorch's Collation<Example<>>, a BatchTransform).
template <typename T = Example, typename BatchType = std::vector<T>>
class Collation {
  static_assert(std::is_same_v<T, Example> && std::is_same_v<BatchType, std::vector<Example>>,
                "lockstep's collations make a data::Batch of a std::vector<data::Example>");

 public:
  virtual ~Collation() = default;
  virtual Batch apply_batch(BatchType examples) const = 0;
};

// A Transform given as a function (LibTorch's Lambda<Input, Output>). `function` may be called from
// several threads at once.
template <typename Input = Example, typename Output = Input>
class Lambda : public Transform<Input, Output> {
 public:
  using FunctionType = std::function<Output(Input)>;
  explicit Lambda(FunctionType function) : function_(std::move(function)) {}
  Output apply(Input input) const override { return function_(std::move(input)); }

 private:
  FunctionType function_;
};

// A Transform of each example's input alone; the target passes through (LibTorch's TensorTransform).
template <typename Target = Tensor>
class TensorTransform : public Transform<> {
  static_assert(std::is_same_v<Target, Tensor>, "lockstep's example targets are Tensors");

 public:
  virtual Tensor operator()(Tensor input) const = 0;
  Example apply(Example example) const override {
    example.input = (*this)(std::move(example.input));
    return example;
  }
};

// A TensorTransform given as a function (LibTorch's TensorLambda).
template <typename Target = Tensor>
class TensorLambda : public TensorTransform<Target> {
 public:
  using FunctionType = std::function<Tensor(Tensor)>;
  explicit TensorLambda(FunctionType function) : function_(std::move(function)) {}
  Tensor operator()(Tensor input) const override { return function_(std::move(input)); }

 private:
  FunctionType function_;
};

namespace detail {
// Normalize's work, out of line (data/transforms.cpp).
Tensor normalize(const Tensor& input, const std::vector<double>& mean, const std::vector<double>& stddev);
void check_normalize_args(const std::vector<double>& mean, const std::vector<double>& stddev);
}  // namespace detail

// (x - mean[c]) / stddev[c] over channel c of each example's input: its dimension 0, as torchvision's
// Normalize on an image [C, H, W] (so also a [C, L] sequence or a [C] vector), computed in the input's
// dtype. mean and stddev hold one value per channel, or one value for every element (any shape then).
// The result has the input's shape and floating dtype, on its device. Bad input (an integer input, a
// channel count that is neither 1 nor the input's size(0), a zero stddev) is an error naming the
// values. LibTorch's Normalize broadcasts [C, 1, 1] against whatever comes and may change the shape;
// this one checks instead.
template <typename Target = Tensor>
class Normalize : public TensorTransform<Target> {
 public:
  Normalize(double mean, double stddev) : Normalize(std::vector<double>{mean}, std::vector<double>{stddev}) {}
  Normalize(std::vector<double> mean, std::vector<double> stddev) : mean_(std::move(mean)), stddev_(std::move(stddev)) {
    detail::check_normalize_args(mean_, stddev_);
  }
  Tensor operator()(Tensor input) const override { return detail::normalize(input, mean_, stddev_); }

  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& stddev() const { return stddev_; }

 private:
  std::vector<double> mean_, stddev_;
};

// Stacks inputs and targets along a new first dimension (LibTorch's Stack<>): data::collate, the
// batching a lockstep Dataset's get_batch does by default, so mapping it changes no value; MapDataset
// then batches through the source's get_batch (one gather per tensor for a TensorDataset).
template <typename T = Example>
class Stack final : public Collation<T> {
 public:
  Batch apply_batch(std::vector<T> examples) const override { return collate(examples); }
};

// A Collation given as a function (LibTorch's Collate<T>, a BatchLambda). The DataLoader's batches are
// what `function` returns; it is never called with no examples (a stream's end).
template <typename T = Example, typename BatchType = std::vector<T>>
class Collate : public Collation<T, BatchType> {
 public:
  using FunctionType = std::function<Batch(BatchType)>;
  explicit Collate(FunctionType function) : function_(std::move(function)) {}
  Batch apply_batch(BatchType examples) const override { return function_(std::move(examples)); }

 private:
  FunctionType function_;
};

}  // namespace lockstep::data::transforms
