// Tensor's differentiable methods (declared in tensor/tensor.h for PyTorch's spelling), forwarding
// to the ops in autograd/functions.h.
#include "autograd/functions.h"
#include "tensor/ops.h"

namespace lockstep {

Tensor Tensor::reshape(const Shape& shape) const { return lockstep::reshape(*this, shape); }

Tensor Tensor::flatten(int64_t start_dim) const {
  int64_t d = ops::wrap_dim(start_dim, std::max<int64_t>(dim(), 1), "flatten");
  Shape s(shape().begin(), shape().begin() + std::min<int64_t>(d, dim()));
  s.push_back(-1);
  return lockstep::reshape(*this, s);
}

Tensor Tensor::t() const { return lockstep::transpose(*this); }
Tensor Tensor::sum() const { return lockstep::sum(*this); }
Tensor Tensor::sum(int64_t d, bool keepdim) const { return lockstep::sum(*this, d, keepdim); }
Tensor Tensor::mean() const { return lockstep::mean(*this); }
Tensor Tensor::mean(int64_t d, bool keepdim) const { return lockstep::mean(*this, d, keepdim); }
Tensor Tensor::max(int64_t d, bool keepdim) const { return lockstep::max(*this, d, keepdim); }
Tensor Tensor::argmax(int64_t d, bool keepdim) const { return ops::argmax(*this, d, keepdim); }
Tensor Tensor::eq(const Tensor& other) const { return ops::eq(*this, other); }
Tensor Tensor::relu() const { return lockstep::relu(*this); }
Tensor Tensor::exp() const { return lockstep::exp(*this); }
Tensor Tensor::log() const { return lockstep::log(*this); }
Tensor Tensor::neg() const { return lockstep::neg(*this); }
Tensor Tensor::log_softmax(int64_t d) const { return lockstep::log_softmax(*this, d); }
Tensor Tensor::to(Device device) const { return lockstep::to(*this, device); }
Tensor Tensor::to(Dtype dtype) const { return lockstep::to(*this, dtype); }
Tensor Tensor::clone() const { return lockstep::clone(*this); }

}  // namespace lockstep
