// ZeroRedundancyOptimizer: ZeRO stage 1, as torch.distributed.optim.ZeroRedundancyOptimizer. Every
// rank keeps the whole model and (after DDP's all-reduce) the whole averaged gradient, but the
// optimizer state only of its own share of the parameters: each rank steps its share, then every
// parameter is broadcast from the rank that owns it, so all ranks hold the same model again. With
// Adam, state is two tensors per parameter, so this saves 2 (W - 1) / W of a model's size per rank.
//
//   dist::DistributedDataParallel ddp(model);
//   auto opt = dist::ZeroRedundancyOptimizer::make<optim::Adam>(ddp.parameters(), optim::AdamOptions(1e-3));
//   loss_fn(ddp(x), y).backward();
//   opt.step();                            // local step, then the parameters' broadcasts
//
// Parameters come in param groups, as PyTorch's (ZeroRedundancyOptimizer([{"params": decay, ...},
// {"params": no_decay, ...}], ...)): each rank's optimizer holds one group per given group, with its share
// of that group's parameters (maybe none). They are assigned to ranks group by group, greedily by size,
// largest first, each to the rank with the fewest elements so far over all groups (PyTorch's
// _partition_parameters); the assignment depends only on the shapes, so every rank computes the same one.
// state_dict() follows PyTorch's layout after consolidate_state_dict(to): state.<i>.<name> numbered over
// the groups' parameters in order, param_groups.<g>.* with each group's indices, the same keys as the
// whole optimizer's state_dict (so a consolidated state loads into a whole optimizer and back); it is
// only available on rank `to`. load_state_dict takes such a state_dict on every rank and keeps each
// rank's share.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "distributed/process_group.h"
#include "optim/optimizer.h"

namespace lockstep::dist {

class ZeroRedundancyOptimizer {
 public:
  // Builds the local optimizer over the parameters it is given (never an empty list), in any groups;
  // consolidate_state_dict and load_state_dict need one group holding them in the given order.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> params)>;
  // Builds the local optimizer over this rank's share of each param group: it must hold one group per
  // share, in order, each with the share's parameters in the order given (a share may be empty).
  using GroupsFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<std::vector<Tensor>> shares)>;

  // `params`: the same list, in the same order, on every rank (model->parameters()), one param group.
  // `process_group` defaults to the default group.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, Factory make_optimizer,
                          std::shared_ptr<ProcessGroup> process_group = nullptr);
  // `param_groups`: the same groups on every rank (PyTorch's list of param-group dicts, the options
  // being the factory's).
  ZeroRedundancyOptimizer(std::vector<std::vector<Tensor>> param_groups, GroupsFactory make_optimizer,
                          std::shared_ptr<ProcessGroup> process_group = nullptr);
  // As PyTorch's ZeroRedundancyOptimizer(params, optimizer_class=Adam, lr=...): an O over each share.
  template <class O, class Options>
  static ZeroRedundancyOptimizer make(std::vector<Tensor> params, Options options,
                                      std::shared_ptr<ProcessGroup> process_group = nullptr) {
    return ZeroRedundancyOptimizer(
        std::move(params), [options](std::vector<Tensor> p) { return std::make_unique<O>(std::move(p), options); },
        std::move(process_group));
  }
  ZeroRedundancyOptimizer(ZeroRedundancyOptimizer&&) = default;

  // Steps this rank's share, then broadcasts every parameter from its owner.
  void step();
  void zero_grad(bool set_to_none = true);

  // The rank that owns parameter i (an index into the list given at construction, or into the groups'
  // lists concatenated).
  int owner(size_t i) const { return owner_.at(i); }
  size_t num_param_groups() const { return group_size_.size(); }
  // The local optimizer (null on a rank that owns no parameter: more ranks than parameters).
  optim::Optimizer* optim() const { return local_.get(); }
  double lr() const;
  void set_lr(double lr);

  // Collective: gathers every rank's share of the state on rank `to` (a broadcast per rank).
  void consolidate_state_dict(int to = 0);
  // The consolidated state_dict (PyTorch's layout; see above). Throws unless consolidate_state_dict(to)
  // ran on this rank, `to`, since the last step.
  optim::StateDict state_dict() const;
  // Takes a consolidated state_dict (every rank's copy of the same one, or a whole optimizer's over the
  // same groups) and loads this rank's share.
  void load_state_dict(const optim::StateDict& state);

 private:
  ZeroRedundancyOptimizer(std::vector<std::vector<Tensor>> param_groups, std::shared_ptr<ProcessGroup> process_group);
  // Checks the local optimizer's groups: one per given group with this rank's share, in the given order.
  void check_groups(const char* op) const;

  std::vector<Tensor> params_;       // the groups' parameters, concatenated
  std::vector<size_t> group_size_;   // parameters per group
  std::vector<int> owner_;
  std::vector<size_t> local_index_;  // parameter i's index in its owner's optimizer
  std::shared_ptr<ProcessGroup> pg_;
  std::unique_ptr<optim::Optimizer> local_;
  std::optional<optim::StateDict> consolidated_;
};

// PyTorch's partition: parameter i goes to rank result[i]; largest first, to the least loaded rank
// (ties: the lowest rank), sizes counted in elements.
std::vector<int> partition_parameters(const std::vector<Tensor>& params, int world_size);
// Over param groups, group by group, the load carried from one group to the next; result[i] for the
// groups' parameters concatenated.
std::vector<int> partition_parameters(const std::vector<std::vector<Tensor>>& param_groups, int world_size);

}  // namespace lockstep::dist
