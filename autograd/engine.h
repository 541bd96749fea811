// The backward engine and the hooks DistributedDataParallel builds on.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::autograd {

// Runs the graph behind `root` once, in reverse topological order, accumulating into the .grad of
// every leaf that requires it. `gradient` defaults to 1 for a one-element root. Unless retain_graph,
// each node's saved tensors are freed as soon as the node has run (so activations do not outlive their
// use while gradients accumulate), and a second backward through the graph is an error.
void backward(const Tensor& root, const Tensor& gradient = Tensor(), bool retain_graph = false);

// torch::autograd::backward: one pass from several roots at once, each with its gradient (an entry
// may be undefined for a one-element root). retain_graph defaults to create_graph. `inputs`, when
// given, limits accumulation to those tensors' .grad. create_graph (a differentiable backward, for
// higher-order gradients) is refused: lockstep's backward formulas are not recorded themselves.
void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
              const std::vector<Tensor>& inputs = {});

// torch::autograd::grad: the gradients of `outputs` (weighted by grad_outputs) with respect to
// `inputs`, returned rather than accumulated into any .grad; only the part of the graph between them
// runs. An input the outputs do not depend on is an error unless allow_unused (its entry is then
// undefined). create_graph is refused as in backward above.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false, bool allow_unused = false);

// Registers fn to run right after `leaf`'s gradient has been accumulated in a backward pass (PyTorch's
// register_post_accumulate_grad_hook). Returns a handle for remove_hook.
uint64_t register_post_accumulate_grad_hook(Tensor& leaf, std::function<void(Tensor& leaf)> fn);
void remove_hook(Tensor& leaf, uint64_t handle);

// Queues fn to run once the current backward pass has visited every node, before backward()
// returns (PyTorch's Engine::queue_callback). Only valid during backward, e.g. from a hook.
void queue_callback(std::function<void()> fn);
// True while this thread is inside backward().
bool in_backward();
// Counts backward passes on this thread (1 during the first): hooks use it to tell passes apart.
uint64_t backward_pass_id();

}  // namespace lockstep::autograd
