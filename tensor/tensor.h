// Tensor: a cheap, shared handle on (storage, offset, shape, dtype). Copying a Tensor copies the
// handle, not the data: both copies see the same elements and the same gradient. clone() and to()
// copy data; reshape()/view()/detach() share storage.
//
// Tensors are contiguous and row-major. Raw, non-differentiable kernels live in tensor/ops.h
// (namespace lockstep::ops). The differentiable methods below (reshape, sum, relu, backward, ...) and
// the arithmetic operators are declared here so that code reads as in PyTorch, and defined in
// autograd/ (link //autograd to call them): the tensor layer itself knows nothing of the graph; it
// only carries each tensor's autograd fields (AutogradMeta).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include "tensor/device.h"
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
struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
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
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  Dtype dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  size_t nbytes() const { return numel() * element_size(dtype()); }

  void* data_ptr() const;
  template <typename T> T* data() const;  // checks that T matches dtype()
  // The single element, copied to the host (synchronizes with the device).
  template <typename T> T item() const;
  // All elements, copied to the host, converted to T.
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

  // --- Differentiable methods, defined in autograd/tensor_methods.cpp -------------------------------
  Tensor reshape(const Shape& shape) const;  // shares storage; one dimension may be -1
  Tensor view(const Shape& shape) const { return reshape(shape); }
  Tensor flatten(int64_t start_dim = 0) const;
  Tensor t() const;  // 2-D transpose (copies: tensors are contiguous)
  Tensor sum() const;
  Tensor sum(int64_t dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor max(int64_t dim, bool keepdim = false) const;  // values
  Tensor argmax(int64_t dim, bool keepdim = false) const;  // int64, not differentiable
  Tensor eq(const Tensor& other) const;  // int64 0/1, not differentiable
  Tensor relu() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor neg() const;
  Tensor log_softmax(int64_t dim) const;
  Tensor to(Device device) const;
  Tensor to(Dtype dtype) const;
  Tensor clone() const;
  Tensor contiguous() const { return *this; }
  // Runs the backward pass from this tensor (a scalar unless `gradient` is given).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;

 private:
  TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

// The autograd fields of a tensor. Written by autograd/ only.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
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
