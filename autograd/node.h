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
  // Views of part of a single input (slice, narrow, select, so split and chunk) can add their gradient
  // straight into the part of the input's gradient slot they cover, rather than return a zero-padded
  // gradient the size of the input that the engine then adds: a split into q, k and v would otherwise
  // cost three zero-filled copies and two full-size adds per backward. `slot` is the input's gradient
  // so far (undefined when none has arrived). Nodes without this path return false.
  virtual bool add_into_input(Tensor& /*slot*/, const Tensor& /*grad_output*/) { return false; }

  std::vector<std::shared_ptr<Node>> next;
  // Storage versions taken when the op was recorded; backward refuses to run the node when one has
  // changed since (an in-place op wrote into it; Tensor::version()). Every input is checked, whether
  // or not backward reads it (conservative: PyTorch checks only the saved ones); the output only when
  // the node saves it (exp, softmax, ...), since an in-place op on the output rebases its history
  // onto a new node and leaves this one's gradient right otherwise.
  struct Version {
    std::weak_ptr<Storage> storage;
    uint64_t version = 0;
    int input = -1;  // the input's position; -1: the output
  };
  std::vector<Version> versions;
  // The output shares an input's storage (a view: reshape, transpose, select, ...): an in-place op on
  // it would also change the input, whose history can't see it, so one is refused (inplace.cpp).
  bool is_view = false;
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

// Whether t is the only handle on its storage and covers it densely (no other tensor can see a write
// to it): the engine and AccumulateGrad then accumulate into it in place.
bool exclusive(const Tensor& t);

// The edge an op's input contributes: its grad_fn, its leaf accumulator, or null.
std::shared_ptr<Node> gradient_edge(const Tensor& t);

// Whether an op's backward reads its own output (exp, sqrt, softmax, max, the recurrent layers): only
// then is an in-place change of the output an error in backward (Node::versions).
enum class Output : bool { NotSaved, Saved };

// Returns `out` connected to the graph: when grad mode is on and any input requires a gradient, a
// FunctionNode named `op` running `backward` becomes out's grad_fn. Otherwise `out` is returned as is.
Tensor record(const char* op, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward,
              Output output = Output::NotSaved);
// The same with a node of another type than FunctionNode (its edges and output are filled in here).
Tensor record(std::shared_ptr<Node> node, Tensor out, const std::vector<Tensor>& inputs,
              Output output = Output::NotSaved);
// After an in-place op wrote into `t`: `node` (whose inputs are t as it was, first, then the op's
// operands) becomes t's grad_fn, as PyTorch rebases a tensor's history. The node's backward must not
// read t's storage (an op that needs t's old values keeps its own copy), so t is not version-checked.
void rebase_history(const Tensor& t, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs);
// Whether an op on `inputs` must be recorded (lets ops skip saving tensors for backward).
bool needs_grad(const std::vector<Tensor>& inputs);

}  // namespace lockstep::autograd
