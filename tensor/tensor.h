// Tensor: a cheap, shared handle on (storage, offset, shape, strides, dtype). Copying a Tensor copies
// the handle, not the data: both copies see the same elements and the same gradient.
//
// Views share storage and copy nothing: transpose, permute, expand, narrow/slice, select, index with
// integers and slices, unsqueeze/squeeze, view, detach, split/chunk/unbind, and reshape where the strides
// allow. These copy: clone, contiguous (only when not already contiguous), reshape of a layout no view
// can express, to(dtype/device), and every op that computes new values.
//
// The methods below are differentiable where PyTorch's are, and are defined in autograd/ (link
// //autograd to call them): the tensor layer itself knows nothing of the graph; it only carries each
// tensor's autograd fields (AutogradMeta). Raw, graph-free kernels live in lockstep::internal
// (tensor/ops.h), for lockstep's own layers; user code never needs them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <climits>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "tensor/device.h"
#include "tensor/scalar.h"
#include "tensor/dtype.h"
#include "tensor/storage.h"

namespace lockstep {

// A shape. Its own type (not a bare std::vector) so that `std::cout << t.shape()` prints
// [30, 5] wherever it is used.
struct Shape : std::vector<int64_t> {
  using std::vector<int64_t>::vector;
  Shape() = default;
  Shape(const std::vector<int64_t>& v) : std::vector<int64_t>(v) {}
};

namespace autograd { struct Node; }
struct TensorIndex;
struct AutogradMeta;

using Strides = std::vector<int64_t>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Strides strides;     // in elements, one per dimension
  int64_t numel = 0;
  Dtype dtype = Dtype::Float32;
  std::unique_ptr<AutogradMeta> autograd;  // null until the tensor takes part in autograd
  ~TensorImpl();
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A new contiguous tensor with uninitialized elements.
  Tensor(const Shape& shape, Dtype dtype, Device device);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }
  const Strides& strides() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;  // in elements
  int64_t storage_offset() const;   // in elements
  int64_t numel() const;
  Dtype dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return lockstep::is_floating_point(dtype()); }
  // Row-major with no gaps (size-1 dimensions may have any stride).
  bool is_contiguous() const;
  size_t nbytes() const { return numel() * element_size(dtype()); }

  // The first element's address; kernels on a non-contiguous tensor must use strides().
  void* data_ptr() const;
  template <typename T> T* data() const;  // checks that T matches dtype()
  // The single element, copied to the host (synchronizes with the device); untyped, as a Scalar
  // (tensor/scalar.h: integral for integer and bool tensors).
  template <typename T> T item() const;
  Scalar item() const;
  // All elements in row-major order, copied to the host, converted to T.
  template <typename T> std::vector<T> to_vector() const;

  const std::shared_ptr<Storage>& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  long use_count() const { return impl_.use_count(); }
  // Points this tensor (and every handle sharing it) at src's data, shape and dtype, as PyTorch's
  // `param.data = src`. Module::to() uses it so references to parameters stay valid.
  void set_data(const Tensor& src);

  // Autograd fields (pure data; the engine lives in autograd/).
  bool requires_grad() const;
  Tensor& set_requires_grad(bool r = true);
  Tensor& requires_grad_(bool r = true) { return set_requires_grad(r); }
  const Tensor& grad() const;  // undefined when no gradient has been accumulated
  void set_grad(const Tensor& g);
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  AutogradMeta& autograd_meta();  // created on first use
  AutogradMeta* autograd_meta_if_any() const;
  // Shares storage, no gradient history (not differentiable by construction).
  Tensor detach() const;
  // New tensors of `shape` with this tensor's dtype and device, as PyTorch's x.new_zeros(shape) ...
  // (tensor/factory.cpp; same-shape ones: zeros_like(x), rand_like(x), ...).
  Tensor new_zeros(const Shape& shape) const;
  Tensor new_ones(const Shape& shape) const;
  Tensor new_full(const Shape& shape, double value) const;
  Tensor new_empty(const Shape& shape) const;

  // --- Differentiable methods, defined in autograd/tensor_methods.cpp -------------------------------
  // Views (share storage; see the top of this file).
  Tensor view(const Shape& shape) const;     // a view; throws when the strides do not allow one
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy; one dimension may be -1
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor t() const;  // 2-D transpose
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dimension; size-1 dimensions broadcast
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start = 0, int64_t end = INT64_MAX, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor index(const std::vector<TensorIndex>& indices) const;  // x.index({Slice(), -1})
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;  // select(dim, i) for each i
  Tensor unfold(int64_t dim, int64_t size, int64_t step) const;  // windows along dim, a new last dim
  Tensor contiguous() const;  // *this when already contiguous
  Tensor clone() const;
  Tensor to(Device device) const;
  Tensor to(Dtype dtype) const;
  Tensor to(Device device, Dtype dtype) const { return to(device).to(dtype); }
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor float_() const { return to(kFloat32); }
  Tensor double_() const { return to(kFloat64); }
  Tensor long_() const { return to(kInt64); }
  Tensor bool_() const { return to(kBool); }

  // Elementwise.
  Tensor neg() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor relu() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  Tensor trunc() const;
  Tensor frac() const;
  Tensor reciprocal() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor log2() const;
  Tensor log10() const;
  Tensor erf() const;
  Tensor erfc() const;
  Tensor erfinv() const;
  Tensor tan() const;
  Tensor asin() const;
  Tensor acos() const;
  Tensor atan() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor atan2(const Tensor& other) const;
  Tensor fmod(const Tensor& other) const;
  Tensor fmod(double other) const;
  Tensor remainder(const Tensor& other) const;
  Tensor remainder(double other) const;
  Tensor clamp_min(double min) const;
  Tensor clamp_max(double max) const;
  Tensor isnan() const;  // bool
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor pow(double exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor square() const;
  Tensor clamp(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor logical_not() const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  // Comparisons return bool tensors (not differentiable).
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(double other) const;
  Tensor lt(double other) const;
  Tensor le(double other) const;
  Tensor gt(double other) const;
  Tensor ge(double other) const;

  // Reductions. `dims` empty means every dimension.
  Tensor sum() const;
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor prod() const;
  Tensor prod(int64_t dim, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false) const;
  Tensor std(const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // (values, indices)
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor amax(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;  // int64, not differentiable
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  // Without a dimension: the index into the flattened tensor, as PyTorch's.
  Tensor argmax() const { return reshape({-1}).argmax(0); }
  Tensor argmin() const { return reshape({-1}).argmin(0); }
  Tensor logsumexp(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor norm(double p = 2, const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  // One dimension, as LibTorch's IntArrayRef takes a single integer: x.norm(2, 1).
  Tensor norm(double p, int64_t dim, bool keepdim = false) const { return norm(p, std::vector<int64_t>{dim}, keepdim); }
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  // Scans along dim; `dtype` as torch.cumsum's.
  Tensor cumsum(int64_t dim, std::optional<Dtype> dtype = std::nullopt) const;
  Tensor cumprod(int64_t dim, std::optional<Dtype> dtype = std::nullopt) const;
  Tensor logcumsumexp(int64_t dim) const;
  std::tuple<Tensor, Tensor> cummax(int64_t dim) const;  // (values, indices)
  std::tuple<Tensor, Tensor> cummin(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;  // 2-D @ 2-D only, as torch.mm
  // Row i along the first dimension (a view), as LibTorch's t[i].
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor all() const;  // bool []: every element non-zero
  Tensor any() const;  // bool []: some element non-zero

  // Compositions (autograd/composite.cpp), as torch.Tensor's; see autograd/functions.h.
  Tensor flip(const std::vector<int64_t>& dims) const;
  Tensor roll(const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {}) const;
  Tensor roll(int64_t shift, std::optional<int64_t> dim = std::nullopt) const;
  Tensor repeat(const std::vector<int64_t>& sizes) const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor outer(const Tensor& other) const;
  Tensor cross(const Tensor& other, std::optional<int64_t> dim = std::nullopt) const;
  Tensor bmm(const Tensor& other) const;
  Tensor addmm(const Tensor& mat1, const Tensor& mat2, double beta = 1, double alpha = 1) const;
  Tensor baddbmm(const Tensor& batch1, const Tensor& batch2, double beta = 1, double alpha = 1) const;
  Tensor lerp(const Tensor& end, double weight) const;
  Tensor lerp(const Tensor& end, const Tensor& weight) const;

  // Scatters, value-sized selections and tensor bounds (autograd/scatter_ops.cpp, selection_ops.cpp,
  // clamp_tensor.cpp), as torch.Tensor's; see autograd/functions.h. reduce: scatter_reduce's "sum",
  // "prod", "mean", "amax", "amin".
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(int64_t dim, const Tensor& index, double value) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                        bool include_self = true) const;
  Tensor index_put(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false) const;
  Tensor nonzero() const;   // int64 [n, dim()]
  Tensor argwhere() const;  // nonzero()
  Tensor masked_select(const Tensor& mask) const;
  Tensor masked_scatter(const Tensor& mask, const Tensor& source) const;
  Tensor bincount(const Tensor& weights = Tensor(), int64_t minlength = 0) const;
  Tensor histc(int64_t bins = 100, double min = 0, double max = 0) const;
  Tensor clamp_min(const Tensor& min) const;
  Tensor clamp_max(const Tensor& max) const;

  // In place (autograd/inplace.cpp), as PyTorch's trailing-underscore methods: they write through any
  // layout (views included, so every handle on the storage sees it), return *this, and bump the
  // storage's version(). Const, as LibTorch's: they change the data, not the handle, so
  // `w.grad().zero_()` works. Recorded by autograd as PyTorch's: `out += identity` on an activation
  // makes the add part of out's history. A leaf that requires grad is refused while grad mode is on, so
  // manual weight updates go in a NoGradGuard block:
  //   { NoGradGuard no_grad; for (auto& p : model->parameters()) p.sub_(p.grad(), lr); }
  // Also refused, where PyTorch would rewrite another tensor's history: a view of a tensor that
  // requires grad, and a tensor sharing its storage whose gradient comes only from the operand.
  // Backward through an op that kept a tensor changed in place afterwards is an error (PyTorch's
  // "modified by an inplace operation"), conservatively for inputs: also where the op kept no copy.
  // Operands broadcast to this shape; a result this dtype can't hold (floats into an integer tensor,
  // any div_ of one) is an error. The operators +=, -=, *=, /= (functions.h) call these.
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;  // this += alpha * other
  const Tensor& sub_(const Tensor& other, double alpha = 1.0) const;  // this -= alpha * other
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& add_(double other) const;
  const Tensor& sub_(double other) const;
  const Tensor& mul_(double other) const;
  const Tensor& div_(double other) const;
  const Tensor& clamp_(std::optional<double> min, std::optional<double> max = std::nullopt) const;
  const Tensor& fill_(double value) const;
  // Overwritten with draws from U[from, to) or N(mean, std) (the default generator), as PyTorch's.
  const Tensor& uniform_(double from = 0, double to = 1) const;
  const Tensor& normal_(double mean = 0, double std = 1) const;
  const Tensor& zero_() const { return fill_(0); }
  const Tensor& copy_(const Tensor& src) const;  // src broadcast to this shape, converted to this dtype and device
  const Tensor& masked_fill_(const Tensor& mask, double value) const;
  // scatter_ (src or value; reduce "add" or "multiply"), scatter_reduce_ and index_put_, recorded by the
  // same rules (autograd/scatter_ops.cpp). index_put_ as LibTorch's: x.index_put_({mask}, v) and
  // x.index_put_({i, j}, v, true) take int64 or bool index tensors for the leading dimensions (the
  // accumulate form names accumulate); x.index_put_({Slice(), 0}, 1.0), without tensors, copies into the
  // view x.index({...}).
  const Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src) const;
  const Tensor& scatter_(int64_t dim, const Tensor& index, double value) const;
  const Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce) const;
  const Tensor& scatter_(int64_t dim, const Tensor& index, double value, const std::string& reduce) const;
  const Tensor& scatter_reduce_(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                                bool include_self = true) const;
  const Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& values) const;
  const Tensor& index_put_(const std::vector<TensorIndex>& indices, double value) const;
  const Tensor& index_put_(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) const;
  // As PyTorch's x.data: this tensor's storage without grad (detach()). Unlike PyTorch's, in-place
  // changes through it still count in the version check above.
  Tensor data() const { return detach(); }
  // How many in-place changes its storage has seen (PyTorch's x._version; views and detach() share it).
  uint64_t version() const;

  // Runs the backward pass from this tensor (a scalar unless `gradient` is given).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;

 private:
  TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

// Tensor::index's entries (see TensorIndex above).
struct NoneIndex {};
struct EllipsisIndex {};
inline constexpr NoneIndex None{};
inline constexpr EllipsisIndex Ellipsis{};
// A slice's start or stop: a number, or None (std::nullopt) for "from the beginning" / "to the end", so
// Slice(None, T) reads as LibTorch's.
struct SliceBound {
  std::optional<int64_t> value;
  SliceBound(NoneIndex) {}
  SliceBound(std::nullopt_t) {}
  SliceBound(std::optional<int64_t> v) : value(v) {}
  SliceBound(int64_t v) : value(v) {}
  SliceBound(int v) : value(v) {}
};
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
  Slice() = default;
  Slice(SliceBound start, SliceBound stop = None, int64_t step = 1)
      : start(start.value), stop(stop.value), step(step) {}
};
struct TensorIndex {
  enum class Kind { Integer, Slice, None, Ellipsis, Tensor } kind;
  int64_t integer = 0;
  lockstep::Slice slice;
  lockstep::Tensor tensor;
  TensorIndex(int64_t i) : kind(Kind::Integer), integer(i) {}
  TensorIndex(int i) : kind(Kind::Integer), integer(i) {}
  TensorIndex(lockstep::Slice s) : kind(Kind::Slice), slice(s) {}
  TensorIndex(NoneIndex) : kind(Kind::None) {}
  TensorIndex(EllipsisIndex) : kind(Kind::Ellipsis) {}
  TensorIndex(lockstep::Tensor t) : kind(Kind::Tensor), tensor(std::move(t)) {}
};

// The autograd fields of a tensor. Written by autograd/ only.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  // The node that accumulates into this leaf's .grad, shared by every use of the leaf in a graph.
  std::weak_ptr<autograd::Node> grad_accumulator;
  // Run right after this leaf's gradient has been accumulated in a backward pass (DDP's hook),
  // keyed by the handle that removes them.
  std::vector<std::pair<uint64_t, std::function<void(Tensor&)>>> post_accumulate_grad_hooks;
};

// Prints "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=float32, device=cpu)"-style text.
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::ostream& operator<<(std::ostream& os, const Shape& s);
std::string shape_str(const Shape& s);

template <typename T>
T* Tensor::data() const {
  LOCKSTEP_CHECK(dtype_of<T>::value == dtype(), "Tensor::data: requested ", dtype_name(dtype_of<T>::value),
                 " from a ", dtype_name(dtype()), " tensor");
  return static_cast<T*>(data_ptr());
}

}  // namespace lockstep
