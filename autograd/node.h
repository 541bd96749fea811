// Node: one recorded op in the autograd graph. Every lockstep op has a single output, so a node maps
// the gradient of its output to one gradient per input; `next[i]` is where input i's gradient goes
// (the node that produced input i, the AccumulateGrad node of a leaf, or null when input i does not
// require a gradient).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::autograd {

struct Node {
  virtual ~Node() = default;
  // Gradients with respect to the inputs, in input order; an undefined tensor means "no gradient".
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // Drops saved tensors once backward has run (unless retain_graph).
  virtual void release() {}
  virtual std::string name() const = 0;

  std::vector<std::shared_ptr<Node>> next;
  Shape output_shape;  // to check gradients flowing in
  Dtype output_dtype = kFloat32;
  Device output_device;
};

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// The node behind every differentiable op: forward code supplies a lambda computing the input
// gradients, capturing only the tensors backward needs.
struct FunctionNode final : Node {
  FunctionNode(std::string op, BackwardFn fn) : op_(std::move(op)), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  void release() override { fn_ = nullptr; }
  std::string name() const override { return op_; }

 private:
  std::string op_;
  BackwardFn fn_;
};

// Accumulates into a leaf's .grad and then runs the leaf's post-accumulate hooks.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::string name() const override { return "AccumulateGrad"; }
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

// The edge an op's input contributes: its grad_fn, its leaf accumulator, or null.
std::shared_ptr<Node> gradient_edge(const Tensor& t);

// Returns `out` connected to the graph: when grad mode is on and any input requires a gradient, a
// FunctionNode named `op` running `backward` becomes out's grad_fn. Otherwise `out` is returned as is.
Tensor record(const char* op, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward);
// Whether an op on `inputs` must be recorded (lets ops skip saving tensors for backward).
bool needs_grad(const std::vector<Tensor>& inputs);

}  // namespace lockstep::autograd
