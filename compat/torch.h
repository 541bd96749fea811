// LibTorch's names for lockstep: a program written for LibTorch (#include <torch/torch.h>) builds against
// lockstep with that line changed to #include <lockstep/torch.h>. namespace torch re-exports lockstep
// (torch::Tensor, torch::nn, torch::optim, torch::NoGradGuard, ...) and adds the spellings lockstep's own
// API does not use: ATen's positional free functions with int64 reductions (torch::nll_loss(out, y, {},
// torch::Reduction::Sum)), torch::data's dataset wrappers whose size() is optional and whose batches are
// Example<>{data, target}, make_data_loader, torch::save / torch::load of modules, optimizers and tensors
// (safetensors files inside), TORCH_MODULE and AT_ASSERT.
//
// It is a header of names only: every call lands in lockstep's own implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "lockstep.h"
#include "data/idx_dataset.h"
#include "tensor/cuda/cuda.h"
#include "tensor/parallel.h"

namespace torch {

using namespace ::lockstep;  // NOLINT: the whole of lockstep under LibTorch's namespace

// The same namespaces under both names (aliases, not copies), so that a program's `using namespace
// torch;` followed by nn::Conv2d(...) is not ambiguous between torch::nn and lockstep::nn.
namespace nn = ::lockstep::nn;
namespace optim = ::lockstep::optim;
namespace cuda {
using ::lockstep::cuda::device_count;
using ::lockstep::cuda::is_available;
}  // namespace cuda
using ::lockstep::set_num_threads;
// The option tags LibTorch keeps in namespace torch: padding, interpolation, grid_sample and
// EmbeddingBag modes.
using ::lockstep::nn::kArea;
using ::lockstep::nn::kBicubic;
using ::lockstep::nn::kBilinear;
using ::lockstep::nn::kBorder;
using ::lockstep::nn::kCircular;
using ::lockstep::nn::kConstant;
using ::lockstep::nn::kLinear;
using ::lockstep::nn::kMax;
using ::lockstep::nn::kMean;
using ::lockstep::nn::kNearest;
using ::lockstep::nn::kNearestExact;
using ::lockstep::nn::kReflect;
using ::lockstep::nn::kReflection;
using ::lockstep::nn::kReplicate;
using ::lockstep::nn::kSum;
using ::lockstep::nn::kTrilinear;
using ::lockstep::nn::kZeros;

// ATen's reduction codes, as torch::Reduction::Sum.
namespace Reduction {
enum Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };
}  // namespace Reduction
inline nn::Reduction to_reduction(int64_t r) {
  LOCKSTEP_CHECK(r >= 0 && r <= 2, "torch::Reduction: expected None (0), Mean (1) or Sum (2), got ", r);
  return r == Reduction::None ? nn::kNone : r == Reduction::Mean ? nn::kMean : nn::kSum;
}

// torch::requires_grad(): options whose tensors require gradients (torch::ones({2, 2}, torch::requires_grad())).
struct RequiresGrad {
  bool value = true;
};
inline RequiresGrad requires_grad(bool value = true) { return {value}; }
// (Declaring an overload here hides lockstep's of the same name from torch::name: they are named again.)
using ::lockstep::ones;
using ::lockstep::randn;
using ::lockstep::zeros;
inline Tensor ones(const Shape& shape, RequiresGrad r) { return ::lockstep::ones(shape).set_requires_grad(r.value); }
inline Tensor zeros(const Shape& shape, RequiresGrad r) { return ::lockstep::zeros(shape).set_requires_grad(r.value); }
inline Tensor randn(const Shape& shape, RequiresGrad r) { return ::lockstep::randn(shape).set_requires_grad(r.value); }

// One size for a 1-D tensor, as LibTorch's IntArrayRef takes it: torch::zeros(n, device).
inline Tensor empty(int64_t n, TensorOptions o = {}) { return ::lockstep::empty(Shape{n}, o); }
inline Tensor zeros(int64_t n, TensorOptions o = {}) { return ::lockstep::zeros(Shape{n}, o); }
inline Tensor ones(int64_t n, TensorOptions o = {}) { return ::lockstep::ones(Shape{n}, o); }
inline Tensor rand(int64_t n, TensorOptions o = {}) { return ::lockstep::rand(Shape{n}, o); }
inline Tensor randn(int64_t n, TensorOptions o = {}) { return ::lockstep::randn(Shape{n}, o); }
inline Tensor randn(int64_t n, RequiresGrad r) { return ::lockstep::randn(Shape{n}).set_requires_grad(r.value); }
using ::lockstep::empty;
using ::lockstep::rand;
// torch::tensor({0.1, 1.0}, torch::kFloat): the values converted to the options' dtype and device.
inline Tensor tensor(std::initializer_list<double> values, TensorOptions o) {
  return ::lockstep::tensor(std::vector<double>(values)).to(o.dtype).to(o.device);
}
using ::lockstep::tensor;

// ATen's positional functions, by their LibTorch signatures.
inline Tensor nll_loss(const Tensor& self, const Tensor& target, const Tensor& weight = {},
                       int64_t reduction = Reduction::Mean, int64_t ignore_index = -100) {
  return nn::functional::nll_loss(
      self, target, nn::NLLLossOptions().weight(weight).reduction(to_reduction(reduction)).ignore_index(ignore_index));
}
inline Tensor binary_cross_entropy(const Tensor& self, const Tensor& target, const Tensor& weight = {},
                                   int64_t reduction = Reduction::Mean) {
  return nn::functional::binary_cross_entropy(self, target,
                                              nn::BCELossOptions().weight(weight).reduction(to_reduction(reduction)));
}
inline Tensor mse_loss(const Tensor& self, const Tensor& target, int64_t reduction = Reduction::Mean) {
  return nn::functional::mse_loss(self, target, nn::MSELossOptions().reduction(to_reduction(reduction)));
}
inline Tensor smooth_l1_loss(const Tensor& self, const Tensor& target, int64_t reduction = Reduction::Mean,
                             double beta = 1.0) {
  return nn::functional::smooth_l1_loss(self, target,
                                        nn::SmoothL1LossOptions().reduction(to_reduction(reduction)).beta(beta));
}
inline Tensor max_pool2d(const Tensor& self, nn::ExpandingArray<2> kernel_size, nn::ExpandingArray<2> stride = 0,
                         nn::ExpandingArray<2> padding = 0, nn::ExpandingArray<2> dilation = 1, bool ceil_mode = false) {
  return nn::functional::max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode);
}
inline Tensor avg_pool2d(const Tensor& self, nn::ExpandingArray<2> kernel_size, nn::ExpandingArray<2> stride = 0,
                         nn::ExpandingArray<2> padding = 0, bool ceil_mode = false, bool count_include_pad = true) {
  return nn::functional::avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad);
}
// torch::str: its arguments streamed into one string.
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// torch::save / torch::load: a module (or holder) and an optimizer as a safetensors checkpoint, a
// tensor as a one-tensor safetensors file.
namespace detail {
template <typename M>
nn::Module* module_of(M& m) {
  if constexpr (std::is_base_of_v<nn::Module, M>) {
    return &m;
  } else {
    return m.get();  // a holder or a shared_ptr
  }
}
}  // namespace detail
template <typename M>
  requires(!std::is_base_of_v<optim::Optimizer, M>)
void save(const M& module, const std::string& path) {
  Checkpoint c;
  c.model = detail::module_of(const_cast<M&>(module));
  save_checkpoint(path, c);
}
template <typename M>
  requires(!std::is_base_of_v<optim::Optimizer, M>)
void load(M& module, const std::string& path) {
  Checkpoint c;
  c.model = detail::module_of(module);
  load_checkpoint(path, c);
}
inline void save(const optim::Optimizer& optimizer, const std::string& path) {
  Checkpoint c;
  c.optimizer = const_cast<optim::Optimizer*>(&optimizer);  // saving reads it only
  save_checkpoint(path, c);
}
inline void load(optim::Optimizer& optimizer, const std::string& path) {
  Checkpoint c;
  c.optimizer = &optimizer;
  load_checkpoint(path, c);
}
inline void save(const Tensor& tensor, const std::string& path) { save_safetensors(path, {{"tensor", tensor}}); }
inline void load(Tensor& tensor, const std::string& path) {
  auto file = load_safetensors(path);
  LOCKSTEP_CHECK(file.tensors.size() == 1, "torch::load: ", path, " holds ", file.tensors.size(),
                 " tensors, not one");
  tensor = file.tensors.front().second;
}

namespace data {

// A batch (or an example) as LibTorch names its parts.
template <typename Data = Tensor, typename Target = Tensor>
struct Example {
  Data data;
  Target target;
};

namespace transforms {
using ::lockstep::data::transforms::Collate;
using ::lockstep::data::transforms::Lambda;
using ::lockstep::data::transforms::Normalize;
using ::lockstep::data::transforms::Stack;
using ::lockstep::data::transforms::TensorLambda;
}  // namespace transforms

namespace samplers {
// Tags for make_data_loader<Sampler>: the order of the examples in each epoch.
struct SequentialSampler {};
struct RandomSampler {};
}  // namespace samplers

namespace datasets {

// A lockstep dataset behind LibTorch's value semantics: map() returns a new wrapper, size() is
// optional (empty for a stream).
class Dataset {
 public:
  explicit Dataset(std::shared_ptr<::lockstep::data::Dataset> impl) : impl_(std::move(impl)) {}
  std::optional<size_t> size() const {
    const int64_t n = impl_->size();
    return n < 0 ? std::nullopt : std::optional<size_t>(static_cast<size_t>(n));
  }
  template <typename TransformType>
  Dataset map(TransformType transform) const {
    return Dataset(std::make_shared<::lockstep::data::MapDataset>(impl_->map(std::move(transform))));
  }
  Example<> get(size_t index) const {
    auto e = impl_->get(static_cast<int64_t>(index));
    return {e.input, e.target};
  }
  const std::shared_ptr<::lockstep::data::Dataset>& impl() const { return impl_; }

 private:
  std::shared_ptr<::lockstep::data::Dataset> impl_;
};

// MNIST-format files in `root` ({train,t10k}-{images-idx3,labels-idx1}-ubyte, raw or .gz): images
// [1, 28, 28] float32 in [0, 1], targets int64, as LibTorch's.
class MNIST : public Dataset {
 public:
  enum class Mode { kTrain, kTest };
  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain)
      : Dataset(load(root, mode == Mode::kTrain)) {}

 private:
  static std::shared_ptr<::lockstep::data::Dataset> load(const std::string& root, bool train) {
    auto flat = ::lockstep::data::load_fashion_mnist(root, train, /*normalize=*/false, /*flatten=*/false);
    // [N, 28, 28] -> [N, 1, 28, 28]: one channel, as LibTorch's MNIST.
    return std::make_shared<::lockstep::data::TensorDataset>(flat->inputs().unsqueeze(1), flat->targets());
  }
};

}  // namespace datasets

struct DataLoaderOptions {
  DataLoaderOptions() = default;
  DataLoaderOptions(size_t batch_size) : batch_size_(batch_size) {}  // NOLINT: as LibTorch's
  LOCKSTEP_ARG(size_t, batch_size, 1);
  LOCKSTEP_ARG(size_t, workers, 0);
  LOCKSTEP_ARG(bool, drop_last, false);
  LOCKSTEP_ARG(std::optional<size_t>, max_jobs, std::nullopt);  // accepted; lockstep bounds by prefetch
};

// The loader make_data_loader returns: iterating it yields Example<>{data, target} batches.
class DataLoader {
 public:
  class Iterator {
   public:
    explicit Iterator(::lockstep::data::DataLoader::Iterator it) : it_(std::move(it)) { load(); }
    Example<>& operator*() { return batch_; }
    Example<>* operator->() { return &batch_; }
    Iterator& operator++() {
      ++it_;
      load();
      return *this;
    }
    bool operator==(const Iterator& other) const { return it_ == other.it_; }
    bool operator!=(const Iterator& other) const { return !(it_ == other.it_); }

   private:
    void load() {
      if (!(it_ == ::lockstep::data::DataLoader::Iterator())) batch_ = {it_->input, it_->target};
    }
    ::lockstep::data::DataLoader::Iterator it_;
    Example<> batch_;
  };

  DataLoader(std::shared_ptr<::lockstep::data::Dataset> dataset, ::lockstep::data::DataLoaderOptions options)
      : loader_(std::move(dataset), std::move(options)) {}
  Iterator begin() { return Iterator(loader_.begin()); }
  Iterator end() { return Iterator(loader_.end()); }

 private:
  ::lockstep::data::DataLoader loader_;
};

// LibTorch's default sampler is a RandomSampler; make_data_loader<samplers::SequentialSampler> keeps
// the dataset's order.
template <typename Sampler = samplers::RandomSampler>
std::unique_ptr<DataLoader> make_data_loader(datasets::Dataset dataset, DataLoaderOptions options) {
  ::lockstep::data::DataLoaderOptions o;
  o.batch_size = static_cast<int64_t>(options.batch_size());
  o.shuffle = std::is_same_v<Sampler, samplers::RandomSampler>;
  o.drop_last = options.drop_last();
  o.num_workers = static_cast<int>(options.workers());
  return std::make_unique<DataLoader>(dataset.impl(), std::move(o));
}
template <typename Sampler = samplers::RandomSampler>
std::unique_ptr<DataLoader> make_data_loader(datasets::Dataset dataset, size_t batch_size) {
  return make_data_loader<Sampler>(std::move(dataset), DataLoaderOptions(batch_size));
}

}  // namespace data
}  // namespace torch

// LibTorch's macros.
#define TORCH_MODULE(Name) LOCKSTEP_MODULE(Name)
#define AT_ASSERT(cond) LOCKSTEP_CHECK(cond, "assertion failed: " #cond)
#define TORCH_CHECK(cond, ...) LOCKSTEP_CHECK(cond, __VA_ARGS__)
