// SGD (sgd.h states the rule) on Backend::sgd_step.
#include "optim/sgd.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::optim {

void SGDOptions::check(const std::string& who) const {
  check_lr(who, lr_);
  check_non_negative(who, "momentum", momentum_);
  check_non_negative(who, "weight_decay", weight_decay_);
  LOCKSTEP_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0), who,
                 ": nesterov momentum requires a momentum and zero dampening, got momentum ", momentum_,
                 " and dampening ", dampening_);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : OptimizerWithOptions("SGD", {{std::move(params), options}}, options) {
  LOCKSTEP_CHECK(!this->params(0).empty(), "SGD: got an empty parameter list");
}

SGD::SGD(std::vector<ParamGroup> groups)
    : OptimizerWithOptions("SGD", groups, groups.empty() ? SGDOptions() : groups[0].options) {}

const Tensor& SGD::momentum_buffer(size_t i) const {
  static const Tensor none;
  const auto& s = state(i);
  auto it = s.find("momentum_buffer");
  return it == s.end() ? none : it->second;
}

void SGD::set_momentum_buffer(size_t i, const Tensor& buf) {
  const std::vector<Tensor> all = params();
  LOCKSTEP_CHECK(i < all.size(), "SGD: no parameter ", i);
  const Tensor& p = all[i];
  LOCKSTEP_CHECK(!buf.defined() || (buf.shape() == p.shape() && buf.dtype() == p.dtype()), "SGD: momentum buffer ",
                 buf.shape(), " does not match parameter ", i, " ", p.shape());
  if (buf.defined()) mutable_state(i)["momentum_buffer"] = internal::to_device(internal::clone(buf), p.device());
  else mutable_state(i).erase("momentum_buffer");
}

void SGD::step() {
  NoGradGuard no_grad;
  size_t i = 0;
  for (size_t group = 0; group < num_param_groups(); ++group) {
    const SGDOptions& o = options(group);
    for (const Tensor& param : params(group)) {
      const size_t index = i++;
      const Tensor& g = param.grad();
      if (!g.defined()) continue;
      Tensor p = param;
      Tensor buf;
      bool first = false;
      if (o.momentum() != 0) {
        auto& s = mutable_state(index);
        auto it = s.find("momentum_buffer");
        if (it == s.end()) {
          it = s.emplace("momentum_buffer", empty_like(p)).first;
          first = true;
        }
        buf = it->second;
      }
      internal::sgd_step_(p, o.maximize() ? internal::neg(g) : g, buf, o.lr(), o.momentum(), o.dampening(), o.weight_decay(),
                          o.nesterov(), first);
    }
  }
}

}  // namespace lockstep::optim
