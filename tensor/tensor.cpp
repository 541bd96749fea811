// Tensor handle: construction, metadata, autograd fields and host access.
#include "tensor/tensor.h"

#include <cstring>

#include "tensor/backend.h"
#include "tensor/memory_stats.h"
#include "tensor/ops.h"

namespace lockstep {

TensorImpl::~TensorImpl() = default;

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  // Never a null pointer, even for empty tensors, so data_ptr() is always valid to pass around.
  data_ = backend_for(device).allocate(nbytes ? nbytes : 1, device);
  // Where the bytes live, not a dispatch: memory_stats adds host bytes to the resident set it reports.
  memory_stats::on_allocate(this, nbytes, device.is_cpu());
}

Storage::~Storage() {
  memory_stats::on_free(this);
  backend_for(device_).deallocate(data_, nbytes_ ? nbytes_ : 1, device_);
}

void Storage::resize_(size_t nbytes) {
  if (nbytes == nbytes_) return;
  memory_stats::on_free(this);
  backend_for(device_).deallocate(data_, nbytes_ ? nbytes_ : 1, device_);
  data_ = nullptr;
  nbytes_ = 0;
  data_ = backend_for(device_).allocate(nbytes ? nbytes : 1, device_);
  nbytes_ = nbytes;
  memory_stats::on_allocate(this, nbytes, device_.is_cpu());  // host bytes count in the resident set
}

static int64_t checked_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    LOCKSTEP_CHECK(s >= 0, "Tensor: negative dimension in shape ", shape);
    n *= s;
  }
  return n;
}

Tensor::Tensor(const Shape& shape, Dtype dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->numel = checked_numel(shape);
  impl->shape = shape;
  impl->strides = internal::contiguous_strides(shape);
  impl->dtype = dtype;
  impl->storage = std::make_shared<Storage>(impl->numel * element_size(dtype), device);
  memory_stats::tag_dtype(impl->storage.get(), dtype);
  impl_ = std::move(impl);
}

TensorImpl& Tensor::checked() const {
  LOCKSTEP_CHECK(impl_, "Tensor: use of an undefined tensor");
  return *impl_;
}

const Shape& Tensor::shape() const { return checked().shape; }
const Strides& Tensor::strides() const { return checked().strides; }
int64_t Tensor::storage_offset() const { return checked().offset; }
int64_t Tensor::stride(int64_t d) const { return strides()[internal::wrap_dim(d, dim(), "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
  const TensorImpl& i = checked();
  int64_t expected = 1;
  for (size_t d = i.shape.size(); d-- > 0;) {
    if (i.shape[d] == 1) continue;
    if (i.strides[d] != expected) return false;
    expected *= i.shape[d];
  }
  return true;
}
int64_t Tensor::numel() const { return checked().numel; }
Dtype Tensor::dtype() const { return checked().dtype; }
Device Tensor::device() const { return checked().storage->device(); }
const std::shared_ptr<Storage>& Tensor::storage() const { return checked().storage; }

int64_t Tensor::size(int64_t d) const {
  return shape()[internal::wrap_dim(d, dim(), "Tensor::size")];
}

void* Tensor::data_ptr() const {
  const TensorImpl& i = checked();
  return static_cast<char*>(i.storage->data()) + i.offset * element_size(i.dtype);
}

template <typename T>
T Tensor::item() const {
  LOCKSTEP_CHECK(numel() == 1, "Tensor::item: expected a tensor with one element, got shape ", shape());
  if constexpr (std::is_same_v<T, bool>) return to_vector<uint8_t>()[0] != 0;
  else return to_vector<T>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = internal::contiguous(internal::to_dtype(internal::to_device(*this, Device::cpu()), dtype_of<T>::value));
  std::vector<T> out(numel());
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * sizeof(T));
  return out;
}

Scalar Tensor::item() const {
  if (is_floating_point()) return Scalar(item<double>());
  return Scalar(item<int64_t>());
}

// item<T>() and to_vector<T>() for each C++ type a dtype has (bool's item reads a byte).
#define LOCKSTEP_ITEM_TYPE(T)               \
  template T Tensor::item<T>() const;       \
  template std::vector<T> Tensor::to_vector<T>() const;
LOCKSTEP_ITEM_TYPE(float)
LOCKSTEP_ITEM_TYPE(double)
LOCKSTEP_ITEM_TYPE(int64_t)
LOCKSTEP_ITEM_TYPE(int32_t)
LOCKSTEP_ITEM_TYPE(int16_t)
LOCKSTEP_ITEM_TYPE(int8_t)
LOCKSTEP_ITEM_TYPE(uint8_t)
#undef LOCKSTEP_ITEM_TYPE
template bool Tensor::item<bool>() const;

// --- autograd fields ---------------------------------------------------------------------------

AutogradMeta& Tensor::autograd_meta() {
  TensorImpl& i = checked();
  if (!i.autograd) i.autograd = std::make_unique<AutogradMeta>();
  return *i.autograd;
}

AutogradMeta* Tensor::autograd_meta_if_any() const { return impl_ ? impl_->autograd.get() : nullptr; }

bool Tensor::requires_grad() const {
  const AutogradMeta* m = autograd_meta_if_any();
  return m && m->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool r) {
  LOCKSTEP_CHECK(!r || lockstep::is_floating_point(dtype()), "Tensor::requires_grad_: only floating-point tensors can require "
                 "gradients, got ", dtype_name(dtype()));
  LOCKSTEP_CHECK(is_leaf(), "Tensor::requires_grad_: can only be set on a leaf tensor (this one was computed by an "
                 "op); use detach() first");
  autograd_meta().requires_grad = r;
  return *this;
}

static const Tensor kUndefined;
static const std::shared_ptr<autograd::Node> kNoNode;

const Tensor& Tensor::grad() const {
  const AutogradMeta* m = autograd_meta_if_any();
  return m ? m->grad : kUndefined;
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    LOCKSTEP_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(),
                   "Tensor::set_grad: gradient ", g.shape(), " ", g.dtype(), " on ", g.device(),
                   " does not match tensor ", shape(), " ", dtype(), " on ", device());
  }
  autograd_meta().grad = g;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = autograd_meta_if_any();
  return !m || !m->grad_fn;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  const AutogradMeta* m = autograd_meta_if_any();
  return m ? m->grad_fn : kNoNode;
}

void Tensor::set_data(const Tensor& src) {
  TensorImpl& i = checked();
  const TensorImpl& o = src.checked();
  i.storage = o.storage;
  i.offset = o.offset;
  i.shape = o.shape;
  i.strides = o.strides;
  i.numel = o.numel;
  i.dtype = o.dtype;
}

uint64_t Tensor::version() const { return checked().storage ? checked().storage->version() : 0; }

Tensor Tensor::detach() const {
  const TensorImpl& i = checked();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = i.storage;
  impl->offset = i.offset;
  impl->shape = i.shape;
  impl->strides = i.strides;
  impl->numel = i.numel;
  impl->dtype = i.dtype;
  return Tensor(std::move(impl));
}

}  // namespace lockstep
