// Optimizer base and SGD.
#include "optim/sgd.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    LOCKSTEP_CHECK(params_[i].defined(), "Optimizer: parameter ", i, " is undefined");
    LOCKSTEP_CHECK(params_[i].is_leaf() && params_[i].requires_grad(), "Optimizer: parameter ", i, " ",
                   params_[i].shape(), " is not a leaf tensor that requires grad");
    for (size_t j = 0; j < i; ++j)
      LOCKSTEP_CHECK(!params_[i].is_same(params_[j]), "Optimizer: parameter ", i, " appears twice (also at ", j, ")");
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) p.autograd_meta().grad = Tensor();
    else internal::fill_(p.autograd_meta().grad, 0.0);
  }
}

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : Optimizer(std::move(params)), options_(o) {
  LOCKSTEP_CHECK(!params_.empty(), "SGD: got an empty parameter list");
  LOCKSTEP_CHECK(std::isfinite(o.lr) && o.lr >= 0, "SGD: invalid learning rate ", o.lr);
  LOCKSTEP_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum);
  LOCKSTEP_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay);
  LOCKSTEP_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
                 "SGD: nesterov momentum requires a momentum and zero dampening, got momentum ", o.momentum,
                 " and dampening ", o.dampening);
  buffers_.resize(params_.size());
}

void SGD::set_lr(double lr) {
  LOCKSTEP_CHECK(std::isfinite(lr) && lr >= 0, "SGD: invalid learning rate ", lr);
  options_.lr = lr;
}

void SGD::set_momentum_buffer(size_t i, const Tensor& buf) {
  LOCKSTEP_CHECK(i < params_.size(), "SGD: no parameter ", i);
  LOCKSTEP_CHECK(!buf.defined() || (buf.shape() == params_[i].shape() && buf.dtype() == params_[i].dtype()),
                 "SGD: momentum buffer ", buf.shape(), " does not match parameter ", i, " ", params_[i].shape());
  buffers_[i] = buf.defined() ? internal::to_device(internal::clone(buf), params_[i].device()) : Tensor();
}

void SGD::step() {
  NoGradGuard no_grad;
  const SGDOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    bool first = false;
    if (o.momentum != 0 && !buffers_[i].defined()) {
      buffers_[i] = empty_like(p);
      first = true;
    }
    internal::sgd_step_(p, g, buffers_[i], o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first);
  }
}

}  // namespace lockstep::optim
