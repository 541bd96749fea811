// The optimizer steps in the ops layer (sgd_step_, adam_step_): checks of the parameter, gradient and
// state tensors for the backend's fused steps, whose per-element rules are tensor/optim_step.h's. A
// bfloat16 or float16 parameter keeps its gradient and state in its dtype and is updated in float32 (each
// element loaded, updated and rounded once: PyTorch's fused optimizers' rule), on both devices.
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {
void check_param_dtype(const Tensor& param, const char* op) {
  LOCKSTEP_CHECK(is_floating_point(param.dtype()), op,
                 ": expected a floating parameter (float32, float64, bfloat16 or float16), got ", param.dtype());
}
}  // namespace

void sgd_step_(Tensor& param, const Tensor& grad, Tensor& buf, double lr, double momentum, double dampening,
               double weight_decay, bool nesterov, bool first_step) {
  LOCKSTEP_CHECK(param.defined() && grad.defined(), "sgd_step_: got an undefined parameter or gradient");
  check_param_dtype(param, "sgd_step_");
  LOCKSTEP_CHECK(grad.shape() == param.shape() && grad.dtype() == param.dtype() && grad.device() == param.device(),
                 "sgd_step_: gradient ", grad.shape(), " ", grad.dtype(), " on ", grad.device(),
                 " does not match parameter ", param.shape(), " ", param.dtype(), " on ", param.device());
  LOCKSTEP_CHECK(param.is_contiguous() && grad.is_contiguous(), "sgd_step_: the parameter and its gradient must be "
                 "contiguous");
  if (momentum != 0) {
    LOCKSTEP_CHECK(buf.defined() && buf.shape() == param.shape() && buf.dtype() == param.dtype() &&
                       buf.device() == param.device() && buf.is_contiguous(),
                   "sgd_step_: momentum buffer does not match parameter ", param.shape());
  }
  // The kernels read and write the three arrays as distinct memory.
  LOCKSTEP_CHECK(grad.data_ptr() != param.data_ptr() && (momentum == 0 || (buf.data_ptr() != param.data_ptr() &&
                                                                              buf.data_ptr() != grad.data_ptr())),
                 "sgd_step_: the parameter, its gradient and its momentum buffer must be distinct tensors");
  if (param.numel())
    backend_for(param.device()).sgd_step(param, grad, buf, lr, momentum, dampening, weight_decay, nesterov, first_step);
}

void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& max_exp_avg_sq,
                const AdamStepArgs& args) {
  LOCKSTEP_CHECK(param.defined() && grad.defined(), "adam_step_: got an undefined parameter or gradient");
  check_param_dtype(param, "adam_step_");
  auto check_like = [&](const Tensor& t, const char* what) {
    LOCKSTEP_CHECK(t.defined() && t.shape() == param.shape() && t.dtype() == param.dtype() &&
                       t.device() == param.device() && t.is_contiguous(),
                   "adam_step_: ", what, " ", (t.defined() ? t.shape() : Shape{}), " does not match parameter ",
                   param.shape(), " ", param.dtype(), " on ", param.device(), " (or is not contiguous)");
  };
  LOCKSTEP_CHECK(param.is_contiguous(), "adam_step_: the parameter must be contiguous");
  check_like(grad, "gradient");
  check_like(exp_avg, "exp_avg");
  check_like(exp_avg_sq, "exp_avg_sq");
  std::vector<const void*> ptrs = {param.data_ptr(), grad.data_ptr(), exp_avg.data_ptr(), exp_avg_sq.data_ptr()};
  if (args.amsgrad) {
    check_like(max_exp_avg_sq, "max_exp_avg_sq");
    ptrs.push_back(max_exp_avg_sq.data_ptr());
  }
  // The kernels read and write the arrays as distinct memory.
  for (size_t i = 0; i < ptrs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      LOCKSTEP_CHECK(param.numel() == 0 || ptrs[i] != ptrs[j],
                     "adam_step_: the parameter, its gradient and its state must be distinct tensors");
  if (param.numel())
    backend_for(param.device()).adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, args);
}

void optim_step_(OptimRule rule, Tensor& param, const Tensor& grad, std::array<Tensor*, 3> states,
                 const OptimStepArgs& args) {
  const char* op = rule == OptimRule::Adagrad ? "adagrad_step_" : "rmsprop_step_";
  LOCKSTEP_CHECK(param.defined() && grad.defined(), op, ": got an undefined parameter or gradient");
  check_param_dtype(param, op);
  LOCKSTEP_CHECK(param.is_contiguous(), op, ": the parameter must be contiguous");
  std::vector<const void*> ptrs = {param.data_ptr()};
  auto check_like = [&](const Tensor& t, const char* what) {
    LOCKSTEP_CHECK(t.defined() && t.shape() == param.shape() && t.dtype() == param.dtype() &&
                       t.device() == param.device() && t.is_contiguous(),
                   op, ": ", what, " ", (t.defined() ? t.shape() : Shape{}), " does not match parameter ",
                   param.shape(), " ", param.dtype(), " on ", param.device(), " (or is not contiguous)");
    ptrs.push_back(t.data_ptr());
  };
  check_like(grad, "gradient");
  const bool used[3] = {true, rule == OptimRule::RMSprop && args.centered,
                        rule == OptimRule::RMSprop && args.momentum > 0};
  for (int i = 0; i < 3; ++i) {
    if (used[i]) {
      LOCKSTEP_CHECK(states[i], op, ": state ", i, " is missing");
      check_like(*states[i], "state");
    } else {
      states[i] = nullptr;
    }
  }
  // The kernels read and write the arrays as distinct memory.
  for (size_t i = 0; i < ptrs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      LOCKSTEP_CHECK(param.numel() == 0 || ptrs[i] != ptrs[j], op,
                     ": the parameter, its gradient and its state must be distinct tensors");
  if (param.numel()) backend_for(param.device()).optim_step(rule, param, grad, states, args);
}

}  // namespace lockstep::internal
