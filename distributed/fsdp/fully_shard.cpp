// fully_shard: making units, the module -> unit registry, FSDPModule's methods and the sharded
// gradient norm clip.
#include "distributed/fsdp/fully_shard.h"

#include <cmath>
#include <map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "distributed/fsdp/unit.h"
#include "distributed/init.h"
#include "nn/utils/clip_grad.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::dist {

namespace in = lockstep::internal;

namespace {
// Module -> its unit. The unit lives as long as the module's hooks hold it; an entry whose unit has
// gone (the module was destroyed, maybe another allocated at its address) counts as absent.
std::map<const nn::Module*, std::weak_ptr<fsdp::Unit>>& registry() {
  static std::map<const nn::Module*, std::weak_ptr<fsdp::Unit>> r;
  return r;
}
}  // namespace

std::shared_ptr<fsdp::Unit> fsdp_unit_of(const nn::Module& module) {
  auto it = registry().find(&module);
  if (it == registry().end()) return nullptr;
  auto u = it->second.lock();
  return u && &u->module() == &module ? u : nullptr;
}

FSDPModule fully_shard(const std::shared_ptr<nn::Module>& module, FSDPOptions options) {
  LOCKSTEP_CHECK(module, "fully_shard: module is null");
  LOCKSTEP_CHECK(!fsdp_unit_of(*module), "fully_shard: ", module->name(), " is already fully_shard-ed");
  auto pg = options.process_group ? options.process_group : (is_initialized() ? default_pg() : nullptr);
  LOCKSTEP_CHECK(pg, "fully_shard: no process group; call init_process_group first");
  // The units already made inside this module keep their parameters.
  auto inner = fsdp::units_in(*module);
  std::unordered_set<TensorImpl*> taken;
  for (auto& u : inner)
    for (auto& e : u->entries()) taken.insert(e.param.impl());
  std::vector<fsdp::FlatEntry> entries;
  for (auto& [name, p] : module->named_parameters()) {
    if (taken.count(p.impl())) continue;
    LOCKSTEP_CHECK(p.defined(), "fully_shard(", module->name(), "): parameter '", name, "' is undefined");
    fsdp::FlatEntry e;  // the Unit lays out shape, offset and numel
    e.name = name;
    e.param = p;
    entries.push_back(std::move(e));
  }

  auto unit = std::make_shared<fsdp::Unit>(*module, std::move(entries), options, pg);
  unit->attach();
  // One context for the whole tree; the inner units are no roots any more.
  auto ctx = std::make_shared<fsdp::Context>();
  for (auto& u : inner) {
    LOCKSTEP_CHECK(&u->process_group() == pg.get(), "fully_shard(", module->name(), "): the unit of ",
                   u->module().name(), " uses another process group");
    u->has_parent = true;
    u->ctx = ctx;
    ctx->units.push_back(u.get());
  }
  unit->ctx = ctx;
  ctx->units.push_back(unit.get());
  registry()[module.get()] = unit;
  // The full parameters just freed went to the device's block cache, by sizes no later allocation asks
  // for: hand them back, or every rank keeps the whole model's bytes resident after all.
  empty_cache(unit->shard().device());
  return FSDPModule(unit);
}

void FSDPModule::unshard() { unit_->unshard(); }
void FSDPModule::reshard() { unit_->reshard(); }

void FSDPModule::set_requires_gradient_sync(bool requires_gradient_sync) {
  for (auto& u : fsdp::units_in(unit_->module())) u->requires_gradient_sync = requires_gradient_sync;
}

void FSDPModule::set_reshard_after_forward(bool reshard_after_forward) {
  for (auto& u : fsdp::units_in(unit_->module())) u->set_reshard_after_forward(reshard_after_forward);
}

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       std::shared_ptr<ProcessGroup> process_group) {
  LOCKSTEP_CHECK(norm_type > 0 && !std::isnan(norm_type), "dist::clip_grad_norm_: invalid norm_type ", norm_type,
                 " (expected a positive number or infinity)");
  LOCKSTEP_CHECK(max_norm >= 0, "dist::clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  auto pg = process_group ? process_group : (is_initialized() ? default_pg() : nullptr);
  LOCKSTEP_CHECK(pg, "dist::clip_grad_norm_: no process group; call init_process_group first");
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined() && p.grad().numel() > 0) grads.push_back(p.grad());
  // This rank's norm, then the ranks' combined: max for inf, else (sum of norm^p)^(1/p), in float64 on
  // the gradients' device (the process group's).
  const Device device = parameters.empty() ? Device::cpu() : parameters[0].device();
  const bool inf = std::isinf(norm_type);
  Tensor local = grads.empty() ? full({}, 0.0, TensorOptions(kFloat64, device))
                               : in::to_dtype(nn::utils::get_total_norm(grads, norm_type), kFloat64);
  Tensor total = inf ? local : in::binary_scalar(BinaryOp::Pow, local, norm_type);
  pg->all_reduce(total, inf ? ReduceOp::MAX : ReduceOp::SUM, false);
  if (!inf) total = in::binary_scalar(BinaryOp::Pow, total, 1.0 / norm_type);
  // Scaled as nn::utils::clip_grad_norm_ scales, in the gradients' dtype.
  total = in::to_dtype(total, grads.empty() ? kFloat32 : grads[0].dtype());
  nn::utils::clip_grads_with_norm_(parameters, max_norm, total);
  return total;
}

}  // namespace lockstep::dist
