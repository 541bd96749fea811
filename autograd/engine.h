// The backward engine and the hooks DistributedDataParallel builds on.
#pragma once

#include <cstdint>
#include <functional>

#include "tensor/tensor.h"

namespace lockstep::autograd {

// Runs the graph behind `root` once, in reverse topological order, accumulating into the .grad of
// every leaf that requires it. `gradient` defaults to 1 for a one-element root. Unless retain_graph,
// each node's saved tensors are freed as soon as the node has run (so activations do not outlive their
// use while gradients accumulate), and a second backward through the graph is an error.
void backward(const Tensor& root, const Tensor& gradient = Tensor(), bool retain_graph = false);

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
