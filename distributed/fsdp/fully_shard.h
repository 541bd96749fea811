// fully_shard: fully sharded data parallelism in the manner of PyTorch's FSDP2
// (torch.distributed.fsdp.fully_shard). Applied to each block of a model and then to the root, it
// makes each a unit whose parameters live in one flat buffer, split evenly across the ranks (padded to a
// multiple of the world size): each rank keeps only its 1/W of the parameters, of their gradients and of
// the optimizer state.
//
//   for (const auto& block : *model->transformer->h) dist::fully_shard(block);
//   dist::fully_shard(model.ptr());
//   optim::AdamW opt(model->parameters(), ...);   // built over the sharded parameters, as with FSDP2
//   auto [logits, loss] = model(idx, targets);    // through the holder, or Module::forward(x)
//   loss.backward();                              // every rank's .grad: its shard of the average
//   opt.step();
//
// A unit's parameters are gathered (all_gather_into_tensor) in a forward pre-hook (nn::Module's forward
// hooks, run by a holder's operator() and Module::forward(x); a call of the typed forward on the module
// itself, model->forward(x), bypasses them), and, unless reshard_after_forward is false, freed again
// after the unit's forward (the root's are kept: backward needs them first). Their storage is freed
// in place (Storage::resize_), so the autograd graph's saved views need no rewriting: backward gathers
// them again when the gradient reaches the unit's output (an identity node put on the output), and when
// every parameter of the unit has its gradient, the unit's flat gradient is reduce-scattered (averaged)
// and the parameters go back to their shards. After the first forward has fixed the units' order, the
// next unit's all-gather is issued asynchronously before this unit computes (in backward: the unit
// before it); the collective runs on the process group's own thread, into a buffer nothing else
// touches until it is waited for.
//
// Between iterations each parameter handle (the module's field, its parameters() entry and the
// optimizer's) is a 1-D view of this rank's part of the flat shard: elements [a, b) of the parameter
// flattened, possibly none; its .grad is the matching view of the reduce-scattered gradient.
// state_dict.h saves full and sharded checkpoints.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace lockstep::dist {

// FSDP2's MixedPrecisionPolicy: the gathered parameters (what forward and backward compute with) in
// param_dtype, the gradients reduce-scattered in reduce_dtype (default: param_dtype); the sharded
// parameters, their gradients and the optimizer stay in the parameters' own dtype.
struct MixedPrecisionPolicy {
  std::optional<Dtype> param_dtype;
  std::optional<Dtype> reduce_dtype;
};

struct FSDPOptions {
  std::shared_ptr<ProcessGroup> process_group = nullptr;  // null: the default group
  bool reshard_after_forward = true;  // ignored for the root, which keeps its parameters for backward
  MixedPrecisionPolicy mp_policy = {};
};

namespace fsdp {
class Unit;
}

// FSDP2's FSDPModule methods on a fully_shard-ed module.
class FSDPModule {
 public:
  explicit FSDPModule(std::shared_ptr<fsdp::Unit> unit) : unit_(std::move(unit)) {}
  // Gathers / frees the unit's full parameters now (FSDPModule.unshard / reshard). Collective.
  void unshard();
  void reshard();
  // False: backward keeps accumulating full gradients locally (no reduce-scatter) in this unit and every
  // unit inside it; the first backward with true again reduce-scatters the sum (FSDP2's gradient
  // accumulation without communication). Every rank must set the same.
  void set_requires_gradient_sync(bool requires_gradient_sync);
  void set_reshard_after_forward(bool reshard_after_forward);
  const std::shared_ptr<fsdp::Unit>& unit() const { return unit_; }

 private:
  std::shared_ptr<fsdp::Unit> unit_;
};

// Shards `module`'s parameters that no fully_shard-ed submodule already holds. Every rank must call
// it on the same modules in the same order, with parameters of one dtype and device per unit.
// Parameters start from rank 0's values. Collective. Throws, naming the module, if it is already
// fully_shard-ed or its parameters differ in dtype or device (a unit left with no parameter of its own,
// a root over units only, is allowed).
FSDPModule fully_shard(const std::shared_ptr<nn::Module>& module, FSDPOptions options = {});
template <typename H>
  requires requires(const H& h) { h.ptr(); }
FSDPModule fully_shard(const H& holder, FSDPOptions options = {}) {
  return fully_shard(std::shared_ptr<nn::Module>(holder.ptr()), std::move(options));
}

// The unit `module` became (null when it is not fully_shard-ed).
std::shared_ptr<fsdp::Unit> fsdp_unit_of(const nn::Module& module);

// torch.nn.utils.clip_grad_norm_ over sharded gradients: the norm of all the ranks' gradients together
// (nn::utils::get_total_norm on each rank, combined by one all_reduce: the sum of norm^p, or the max for
// norm_type inf), then nn::utils::clip_grads_with_norm_. Returns the total norm (a [] tensor of the
// gradients' dtype on their device). Any positive norm_type, as PyTorch. Collective.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       std::shared_ptr<ProcessGroup> process_group = nullptr);

}  // namespace lockstep::dist
