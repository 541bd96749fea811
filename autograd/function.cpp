// Custom autograd functions: the node that runs a user's backward, and IValue's errors.
//
// lockstep's nodes have one output each (node.h). A forward with several outputs gets one node for
// the user's backward (CustomFunctionNode, the "hub", connected to the inputs) and, per differentiable
// output, a small OutputNode whose only edge leads to the hub: an OutputNode keeps its output's
// gradient in the hub and passes on a 0-d placeholder, so the hub runs once, after every output's
// gradient has arrived (the engine's dependency count), and hands backward all of them at once.
#include "autograd/function.h"

#include <algorithm>

#include "autograd/node.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::autograd {

const char* IValue::tagKind() const {
  static const char* names[] = {"None", "double", "int", "bool", "string", "Tensor", "int[]", "double[]"};
  return names[v_.index()];
}

void IValue::fail_type(const char* op) const { fail("IValue::", op, ": the value holds ", tagKind()); }

void AutogradContext::save_for_backward(variable_list to_save) { saved_ = std::move(to_save); }

variable_list AutogradContext::get_saved_variables() const {
  LOCKSTEP_CHECK(!released_, "get_saved_variables: trying to backward through the graph a second time (its saved "
                 "tensors were freed); pass retain_graph = true to the first backward");
  return saved_;
}

void AutogradContext::mark_non_differentiable(const variable_list& outputs) {
  for (const Tensor& t : outputs)
    if (t.defined()) non_differentiable_.push_back(t.impl());
}

bool AutogradContext::needs_input_grad(size_t index) const {
  LOCKSTEP_CHECK(index < needs_input_grad_.size(), "needs_input_grad: index ", index, " out of range for a forward of ",
                 needs_input_grad_.size(), " arguments");
  return needs_input_grad_[index];
}

// Runs the user's backward on every output's gradient and checks what it returns against forward's
// arguments: one gradient per argument, none for a non-tensor, each shaped as its input.
struct CustomFunctionNode final : Node {
  struct OutputInfo {
    Shape shape;
    Dtype dtype;
    Device device;
  };
  CustomFunctionNode(std::shared_ptr<AutogradContext> ctx, std::string name, std::vector<bool> is_tensor,
                     variable_list inputs, std::vector<OutputInfo> outputs,
                     variable_list (*backward)(AutogradContext*, variable_list))
      : ctx_(std::move(ctx)), name_(std::move(name)), is_tensor_(std::move(is_tensor)), outputs_(std::move(outputs)),
        grads_(outputs_.size()), backward_(backward) {
    for (const Tensor& t : inputs) inputs_.push_back({t.shape(), t.dtype(), t.device()});
  }

  // One output: `g` is its gradient. With several, `g` is the placeholder and the gradients are in
  // grads_ (OutputNode).
  std::vector<Tensor> apply(const Tensor& g) override {
    LOCKSTEP_CHECK(!ctx_->released_, name_, ": trying to backward through the graph a second time (its saved "
                   "tensors were freed); pass retain_graph = true to the first backward");
    variable_list grad_outputs = outputs_.size() == 1 ? variable_list{g} : std::move(grads_);
    grads_.assign(outputs_.size(), Tensor());
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (!grad_outputs[i].defined() && ctx_->materialize_grads_)
        grad_outputs[i] = zeros(outputs_[i].shape, {outputs_[i].dtype, outputs_[i].device});
    variable_list result = backward_(ctx_.get(), std::move(grad_outputs));
    const size_t n = is_tensor_.size();
    bool extra_defined = false;
    for (size_t i = n; i < result.size(); ++i) extra_defined |= result[i].defined();
    LOCKSTEP_CHECK(result.size() >= n && !extra_defined, name_, ": backward returned ", result.size(),
                   " gradients; expected ", n, " (one per argument of forward, an undefined Tensor for those that are "
                   "not tensors)");
    std::vector<Tensor> grads;
    for (size_t i = 0, input = 0; i < n; ++i) {
      if (!is_tensor_[i]) {
        LOCKSTEP_CHECK(!result[i].defined(), name_, ": backward returned a gradient at position ", i,
                       ", but that argument of forward is not a tensor (return an undefined Tensor there)");
        continue;
      }
      Tensor gi = result[i];
      const OutputInfo& in = inputs_[input++];
      if (gi.defined()) {
        LOCKSTEP_CHECK(gi.device() == in.device, name_, ": backward returned a gradient on ", gi.device(),
                       " at position ", i, " for an input on ", in.device);
        if (gi.shape() != in.shape) {
          int64_t numel = 1;
          for (int64_t d : in.shape) numel *= d;
          LOCKSTEP_CHECK(gi.numel() == numel || broadcastable_to(in.shape, gi.shape()), name_,
                         ": backward returned an invalid gradient at position ", i, ": got ", gi.shape(),
                         " but expected a shape compatible with ", in.shape);
          gi = gi.numel() == numel ? internal::reshape(gi, in.shape) : internal::sum_to(gi, in.shape);
        }
        if (gi.dtype() != in.dtype && is_floating_point(in.dtype)) gi = internal::to_dtype(gi, in.dtype);
      }
      grads.push_back(std::move(gi));
    }
    return grads;
  }
  void release() override {
    ctx_->saved_.clear();
    ctx_->released_ = true;
  }
  std::string name() const override { return name_; }

  std::shared_ptr<AutogradContext> ctx_;
  std::string name_;
  std::vector<bool> is_tensor_;
  std::vector<OutputInfo> inputs_;
  std::vector<OutputInfo> outputs_;
  variable_list grads_;  // with several outputs: each output's gradient, filled by its OutputNode
  variable_list (*backward_)(AutogradContext*, variable_list);

 private:
  // Whether `shape` can be broadcast to `to` (so that summing `to` back gives `shape`).
  static bool broadcastable_to(const Shape& shape, const Shape& to) {
    if (shape.size() > to.size()) return false;
    for (size_t i = 0; i < shape.size(); ++i) {
      const int64_t a = shape[shape.size() - 1 - i], b = to[to.size() - 1 - i];
      if (a != b && a != 1) return false;
    }
    return true;
  }
};

// One output of a multi-output function: keeps its gradient in the hub and passes the placeholder on.
struct OutputNode final : Node {
  OutputNode(CustomFunctionNode* hub, size_t index) : hub_(hub), index_(index) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor& slot = hub_->grads_[index_];
    slot = slot.defined() ? internal::add(slot, g) : g;
    return {zeros(Shape{})};
  }
  std::string name() const override { return hub_->name_; }

 private:
  CustomFunctionNode* hub_;  // alive: it is this node's only edge
  size_t index_;
};

variable_list wrap_outputs(const std::shared_ptr<AutogradContext>& ctx, const std::string& name,
                           const variable_list& inputs, const std::vector<bool>& is_tensor, variable_list outputs,
                           variable_list (*backward)(AutogradContext*, variable_list)) {
  for (size_t i = 0, input = 0; i < is_tensor.size(); ++i) {
    const Tensor* t = is_tensor[i] ? &inputs[input++] : nullptr;
    ctx->needs_input_grad_.push_back(t && GradMode::is_enabled() && t->defined() && t->requires_grad());
  }
  if (!needs_grad(inputs)) return outputs;

  // The differentiable outputs: defined, floating, not marked.
  std::vector<size_t> diff;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    const auto& nd = ctx->non_differentiable_;
    if (o.defined() && is_floating_point(o.dtype()) && std::find(nd.begin(), nd.end(), o.impl()) == nd.end())
      diff.push_back(i);
  }
  if (diff.empty()) return outputs;
  // An output that is also saved is saved without its history: the node holding it would otherwise be
  // kept alive by its own output (a cycle). record() gives the returned output a new handle.
  auto saved_output = [&](size_t i) {
    return std::any_of(ctx->saved_.begin(), ctx->saved_.end(),
                       [&](const Tensor& s) { return s.defined() && s.impl() == outputs[i].impl(); });
  };
  for (Tensor& s : ctx->saved_)
    for (size_t i : diff)
      if (s.defined() && s.impl() == outputs[i].impl()) s = s.detach();

  std::vector<CustomFunctionNode::OutputInfo> infos;
  for (const Tensor& o : outputs) infos.push_back({o.defined() ? o.shape() : Shape{}, o.defined() ? o.dtype() : kFloat32,
                                                   o.defined() ? o.device() : Device()});
  auto hub = std::make_shared<CustomFunctionNode>(ctx, name, is_tensor, inputs, infos, backward);
  if (outputs.size() == 1) {
    outputs[0] = record(hub, outputs[0], inputs, saved_output(0) ? Output::Saved : Output::NotSaved);
    return outputs;
  }
  // The hub's own output is the 0-d placeholder each OutputNode passes on.
  Tensor placeholder = record(hub, zeros(Shape{}), inputs);
  for (size_t i : diff)
    outputs[i] = record(std::make_shared<OutputNode>(hub.get(), i), outputs[i], {placeholder},
                        saved_output(i) ? Output::Saved : Output::NotSaved);
  return outputs;
}

}  // namespace lockstep::autograd
