// The backward engine: dependency counting over the graph reachable from the root, then one pass in
// reverse topological order. Also grad mode, recording, AccumulateGrad and hooks.
#include "autograd/engine.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/factory.h"
#include "tensor/memory_stats.h"
#include "tensor/ops.h"

namespace lockstep {

static thread_local bool grad_enabled = true;
bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward(*this, gradient, retain_graph);
}

namespace autograd {

namespace {
thread_local bool backward_running = false;
thread_local std::vector<std::function<void()>> callbacks;
thread_local uint64_t pass_id = 0;
uint64_t next_hook_id = 1;
}  // namespace

std::vector<Tensor> FunctionNode::apply(const Tensor& grad_output) {
  LOCKSTEP_CHECK(fn_, "backward: trying to backward through the graph of ", op_,
                 " a second time (its saved tensors were freed); pass retain_graph = true to the first backward");
  return fn_(grad_output);
}

bool exclusive(const Tensor& t) {
  return t.use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous();
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad) {
  AutogradMeta& meta = leaf_.autograd_meta();
  if (!meta.grad.defined()) {
    // Take the incoming tensor itself when nothing else can see it; otherwise copy, so that later
    // in-place accumulation cannot write into another tensor's gradient.
    // A view (an expanded or transposed gradient) is copied too: .grad is always contiguous.
    meta.grad = exclusive(grad) ? grad.detach() : internal::clone(grad);
  } else {
    NoGradGuard no_grad;
    internal::add_(meta.grad, grad);
  }
  for (auto& [id, fn] : meta.post_accumulate_grad_hooks) fn(leaf_);
  return {};
}

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined()) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  if (!t.requires_grad()) return nullptr;
  AutogradMeta& meta = const_cast<Tensor&>(t).autograd_meta();
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    acc->output_shape = t.shape();
    acc->output_dtype = t.dtype();
    acc->output_device = t.device();
    meta.grad_accumulator = acc;
  }
  return acc;
}

// PyTorch's "one of the variables needed for gradient computation has been modified by an inplace
// operation", checked on the versions the node took (Node::versions).
static void check_versions(const Node& n) {
  for (const Node::Version& v : n.versions) {
    auto storage = v.storage.lock();
    if (!storage || storage->version() == v.version) continue;
    fail("backward: one of the variables needed for gradient computation has been modified by an inplace "
         "operation: ", v.input < 0 ? std::string("the output") : "input " + std::to_string(v.input), " of ",
         n.name(), " is at version ", storage->version(), "; expected version ", v.version,
         " (the op was recorded before the in-place change; clone() it first, or change it after backward)");
  }
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* op, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward, Output output) {
  if (!needs_grad(inputs)) return out;
  return record(std::make_shared<FunctionNode>(op, std::move(backward)), std::move(out), inputs, output);
}

namespace {

// The edges and versions of `node`'s inputs, skipping the versions of `skip`'s storage.
void connect(Node& node, const std::vector<Tensor>& inputs, const Storage* skip) {
  node.next.reserve(inputs.size());
  for (const Tensor& t : inputs) node.next.push_back(gradient_edge(t));
  node.versions.reserve(inputs.size() + 1);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].storage().get() != skip)
      node.versions.push_back({inputs[i].storage(), inputs[i].version(), static_cast<int>(i)});
}

void attach(const Tensor& out, std::shared_ptr<Node> node) {
  node->output_shape = out.shape();
  node->output_dtype = out.dtype();
  node->output_device = out.device();
  AutogradMeta& meta = const_cast<Tensor&>(out).autograd_meta();
  meta.requires_grad = true;
  meta.grad_fn = std::move(node);
}

}  // namespace

Tensor record(std::shared_ptr<Node> node, Tensor out, const std::vector<Tensor>& inputs, Output output) {
  if (!needs_grad(inputs)) return out;
  if (out.use_count() > 1) out = out.detach();  // never rewrite the history of a tensor someone else holds
  connect(*node, inputs, nullptr);
  for (const Tensor& t : inputs) node->is_view |= t.defined() && t.storage() == out.storage();
  if (output == Output::Saved) node->versions.push_back({out.storage(), out.version(), -1});
  if (memory_stats::enabled()) memory_stats::tag_op(out.storage().get(), node->name());
  attach(out, std::move(node));
  return out;
}

void rebase_history(const Tensor& t, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs) {
  connect(*node, inputs, t.storage().get());
  attach(t, std::move(node));
}

uint64_t register_post_accumulate_grad_hook(Tensor& leaf, std::function<void(Tensor&)> fn) {
  LOCKSTEP_CHECK(leaf.is_leaf() && leaf.requires_grad(),
                 "register_post_accumulate_grad_hook: expected a leaf tensor that requires grad");
  uint64_t id = next_hook_id++;
  leaf.autograd_meta().post_accumulate_grad_hooks.emplace_back(id, std::move(fn));
  return id;
}

void remove_hook(Tensor& leaf, uint64_t handle) {
  auto& hooks = leaf.autograd_meta().post_accumulate_grad_hooks;
  std::erase_if(hooks, [&](const auto& h) { return h.first == handle; });
}

void queue_callback(std::function<void()> fn) {
  LOCKSTEP_CHECK(backward_running, "queue_callback: only valid while a backward pass runs");
  callbacks.push_back(std::move(fn));
}

bool in_backward() { return backward_running; }
uint64_t backward_pass_id() { return pass_id; }

namespace {

// One root of a pass: its node and the gradient it starts from.
struct Root {
  std::shared_ptr<Node> node;
  Tensor grad;
};

// `op`'s check of one root and its gradient (1 for an undefined gradient of a one-element root).
Root make_root(const char* op, const Tensor& root, const Tensor& gradient) {
  LOCKSTEP_CHECK(root.defined(), op, ": called on an undefined tensor");
  std::shared_ptr<Node> node = gradient_edge(root);
  LOCKSTEP_CHECK(node, op, ": tensor of shape ", root.shape(),
                 " does not require grad and has no grad_fn (did you forget requires_grad_() or run under NoGradGuard?)");
  Tensor grad = gradient;
  if (!grad.defined()) {
    LOCKSTEP_CHECK(root.numel() == 1, op, ": grad can be implicitly created only for one-element outputs, got shape ",
                   root.shape());
    grad = ones_like(root);
  }
  LOCKSTEP_CHECK(grad.shape() == root.shape() && grad.dtype() == root.dtype() && grad.device() == root.device(), op,
                 ": gradient ", grad.shape(), " ", grad.dtype(), " on ", grad.device(), " does not match the output ",
                 root.shape(), " ", root.dtype(), " on ", root.device());
  return {std::move(node), std::move(grad)};
}

std::vector<Root> make_roots(const char* op, const std::vector<Tensor>& tensors, const std::vector<Tensor>& grads) {
  LOCKSTEP_CHECK(!tensors.empty(), op, ": no tensors to differentiate");
  LOCKSTEP_CHECK(grads.empty() || grads.size() == tensors.size(), op, ": got ", grads.size(), " gradients for ",
                 tensors.size(), " tensors");
  std::vector<Root> roots;
  for (size_t i = 0; i < tensors.size(); ++i) roots.push_back(make_root(op, tensors[i], grads.empty() ? Tensor() : grads[i]));
  return roots;
}

void refuse_create_graph(const char* op, bool create_graph) {
  LOCKSTEP_CHECK(!create_graph, op, ": create_graph (higher-order gradients) is not supported: lockstep's backward "
                 "formulas are not themselves recorded, so a gradient cannot be differentiated again");
}

// Where a pass stops: the nodes whose incoming gradient is wanted (grad()'s inputs, or backward()'s
// `inputs`). Their gradients are captured when they become ready; with `accumulate`, a captured leaf
// still accumulates into its .grad (backward with inputs), otherwise nothing accumulates (grad).
struct Targets {
  std::vector<Node*> nodes;  // in the inputs' order (one node may stand for two inputs)
  bool accumulate = false;
  std::unordered_map<Node*, Tensor> captured;
};

// The pass: dependency counting over the graph reachable from the roots, then one sweep in reverse
// topological order. With targets, only the nodes from which a target can be reached run.
void execute(std::vector<Root> roots, bool retain_graph, Targets* targets) {
  LOCKSTEP_CHECK(!backward_running, "backward: a backward pass is already running on this thread");

  // Count, for every reachable node, how many edges lead into it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  for (const Root& r : roots)
    if (deps.emplace(r.node.get(), 0).second) stack.push_back(r.node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& next : n->next) {
      if (!next) continue;
      if (deps.emplace(next.get(), 0).second) stack.push_back(next.get());
      ++deps[next.get()];
    }
  }

  // With targets: which nodes lead to one (a post-order walk; a target leads to itself).
  std::unordered_set<Node*> target_set;
  if (targets) target_set.insert(targets->nodes.begin(), targets->nodes.end());
  auto is_target = [&](Node* n) { return target_set.count(n) > 0; };
  std::unordered_map<Node*, bool> leads;
  if (targets) {
    for (const Root& r : roots) {
      if (!leads.emplace(r.node.get(), false).second) continue;
      std::vector<std::pair<Node*, size_t>> walk{{r.node.get(), 0}};
      while (!walk.empty()) {
        Node* n = walk.back().first;
        size_t& i = walk.back().second;
        if (i < n->next.size()) {
          Node* next = n->next[i++].get();
          if (next && leads.emplace(next, false).second) walk.push_back({next, 0});
          continue;
        }
        bool l = is_target(n);
        for (auto& next : n->next) l = l || (next && leads[next.get()]);
        leads[n] = l;
        walk.pop_back();
      }
    }
  }

  struct Reset {
    ~Reset() {
      backward_running = false;
      callbacks.clear();
    }
  } reset;
  backward_running = true;
  ++pass_id;
  NoGradGuard no_grad;  // gradients themselves are not differentiated (no double backward)
  std::unordered_map<Node*, Tensor> grads;
  std::vector<Node*> ready;
  for (Root& r : roots) {
    Tensor& slot = grads[r.node.get()];
    slot = slot.defined() ? internal::add(slot, r.grad) : std::move(r.grad);
    if (deps[r.node.get()] == 0 && std::find(ready.begin(), ready.end(), r.node.get()) == ready.end())
      ready.push_back(r.node.get());
  }
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g;
    if (auto it = grads.find(n); it != grads.end()) {
      g = std::move(it->second);
      grads.erase(it);
    }
    bool run = true;
    if (targets) {
      const bool target = is_target(n);
      if (target && g.defined()) targets->captured[n] = g;
      // A target leaf accumulates only in backward(inputs); other nodes run only on the way to a target.
      const bool leaf = dynamic_cast<AccumulateGrad*>(n) != nullptr;
      run = leaf ? target && targets->accumulate : leads[n] && std::any_of(n->next.begin(), n->next.end(), [&](auto& x) {
        return x && leads[x.get()];
      });
    }
    std::vector<Tensor> in_grads;
    if (g.defined() && run) {
      LOCKSTEP_CHECK(g.shape() == n->output_shape, "backward: ", n->name(), " received a gradient of shape ", g.shape(),
                     " for an output of shape ", n->output_shape);
      check_versions(*n);
      std::optional<memory_stats::Scope> label;
      if (memory_stats::enabled()) label.emplace("backward " + n->name());
      if (n->next.size() != 1 || !n->next[0] || !n->add_into_input(grads[n->next[0].get()], g)) in_grads = n->apply(g);
    }
    // The node's saved tensors are not read again: free them now, as PyTorch does, rather than hold
    // every activation until the whole pass ends while the gradients pile up beside them.
    if (!retain_graph && run) n->release();
    g = Tensor();
    if (!run) continue;  // nothing past it is wanted
    for (size_t i = 0; i < n->next.size(); ++i) {
      Node* next = n->next[i].get();
      if (!next) continue;
      if (i < in_grads.size() && in_grads[i].defined()) {
        Tensor& slot = grads[next];
        if (!slot.defined()) slot = std::move(in_grads[i]);
        else if (exclusive(slot)) internal::add_(slot, in_grads[i]);  // no new buffer when nothing else sees it
        else slot = internal::add(slot, in_grads[i]);
      }
      if (--deps[next] == 0) ready.push_back(next);
    }
  }
  // Callbacks may queue more callbacks (DDP finalising after its last bucket): run until none remain.
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto fn = std::move(callbacks[i]);
    fn();
  }
}

// The nodes whose gradient stands for `inputs`' (a leaf's accumulator or a result's grad_fn).
std::vector<Node*> target_nodes(const char* op, const std::vector<Tensor>& inputs) {
  LOCKSTEP_CHECK(!inputs.empty(), op, ": no inputs to differentiate with respect to");
  std::vector<Node*> nodes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOCKSTEP_CHECK(inputs[i].defined(), op, ": input ", i, " is undefined");
    std::shared_ptr<Node> edge = gradient_edge(inputs[i]);
    LOCKSTEP_CHECK(edge, op, ": input ", i, " (shape ", inputs[i].shape(), ") does not require grad");
    nodes.push_back(edge.get());
  }
  return nodes;
}

}  // namespace

void backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  execute({make_root("backward", root, gradient)}, retain_graph, nullptr);
}

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors,
              std::optional<bool> retain_graph, bool create_graph, const std::vector<Tensor>& inputs) {
  refuse_create_graph("backward", create_graph);
  std::vector<Root> roots = make_roots("backward", tensors, grad_tensors);
  if (inputs.empty()) return execute(std::move(roots), retain_graph.value_or(create_graph), nullptr);
  Targets targets{target_nodes("backward", inputs), /*accumulate=*/true, {}};
  // A non-leaf input accumulates into its own .grad, as PyTorch's backward(inputs=...) does.
  execute(std::move(roots), retain_graph.value_or(create_graph), &targets);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_leaf()) continue;
    auto it = targets.captured.find(targets.nodes[i]);
    if (it == targets.captured.end()) continue;
    AutogradMeta& meta = const_cast<Tensor&>(inputs[i]).autograd_meta();
    meta.grad = meta.grad.defined() ? internal::add(meta.grad, it->second) : internal::clone(it->second);
  }
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph, bool create_graph,
                         bool allow_unused) {
  refuse_create_graph("grad", create_graph);
  std::vector<Root> roots = make_roots("grad", outputs, grad_outputs);
  Targets targets{target_nodes("grad", inputs), /*accumulate=*/false, {}};
  execute(std::move(roots), retain_graph.value_or(create_graph), &targets);
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto it = targets.captured.find(targets.nodes[i]);
    LOCKSTEP_CHECK(it != targets.captured.end() || allow_unused, "grad: input ", i, " (shape ", inputs[i].shape(),
                   ") appears not to have been used in the graph; pass allow_unused = true if this is intended");
    result.push_back(it == targets.captured.end() ? Tensor() : it->second);
  }
  return result;
}

}  // namespace autograd
}  // namespace lockstep
