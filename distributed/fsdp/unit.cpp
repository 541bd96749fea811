// fsdp::Unit: gathering, freeing and reduce-scattering one unit's flat buffer (unit.h).
#include "distributed/fsdp/unit.h"

#include <algorithm>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::dist::fsdp {

namespace in = lockstep::internal;

void Context::ensure_callback() {
  const uint64_t pass = autograd::backward_pass_id();
  if (callback_pass == pass) return;
  callback_pass = pass;
  autograd::queue_callback([self = shared_from_this()] { self->finish_backward(); });
}

void Context::finish_backward() {
  // The same order on every rank: units whose backward did not end on its own (unused parameters)
  // reduce-scatter here, in tree order, after those already issued.
  for (Unit* u : units) u->finish_backward();
}

Unit::Unit(nn::Module& module, std::vector<FlatEntry> entries, FSDPOptions options, std::shared_ptr<ProcessGroup> pg)
    : module_(&module), entries_(std::move(entries)), options_(std::move(options)), pg_(std::move(pg)) {
  const int W = pg_->size();
  dtype_ = entries_.empty() ? kFloat32 : entries_[0].param.dtype();
  device_ = entries_.empty() ? Device::cpu() : entries_[0].param.device();
  int64_t n = 0;
  for (auto& e : entries_) {
    LOCKSTEP_CHECK(e.param.dtype() == dtype_ && e.param.device() == device_, "fully_shard(", module.name(),
                   "): parameter '", e.name, "' is ", e.param.dtype(), " on ", e.param.device(), " but '",
                   entries_[0].name, "' is ", dtype_, " on ", device_, "; one unit's parameters share a dtype and device");
    LOCKSTEP_CHECK(is_floating_point(dtype_), "fully_shard(", module.name(), "): parameter '", e.name, "' is ",
                   dtype_, "; only floating-point parameters are sharded");
    e.shape = e.param.shape();
    e.numel = e.param.numel();
    e.offset = n;
    n += e.numel;
    if (e.param.requires_grad()) ++requiring_grad_;
  }
  compute_dtype_ = options_.mp_policy.param_dtype.value_or(dtype_);
  reduce_dtype_ = options_.mp_policy.reduce_dtype.value_or(compute_dtype_);
  LOCKSTEP_CHECK(is_floating_point(compute_dtype_) && is_floating_point(reduce_dtype_), "fully_shard(", module.name(),
                 "): MixedPrecisionPolicy dtypes must be floating point, got param_dtype ", compute_dtype_,
                 " and reduce_dtype ", reduce_dtype_);
  shard_numel_ = (n + W - 1) / W;

  // Rank 0's values everywhere, then this rank's part of each parameter into the shard.
  NoGradGuard no_grad;
  for (auto& e : entries_) {
    Tensor p = e.param.detach();
    if (!p.is_contiguous()) {
      p = in::clone(p);
      e.param.set_data(p);
    }
    if (W > 1) pg_->broadcast(p, 0, false);
  }
  shard_ = zeros({shard_numel_}, TensorOptions(dtype_, device_));
  for (auto& e : entries_) {
    auto [a, b] = local_range(e);
    if (b <= a) continue;
    Tensor dst = in::view_range(shard_, e.offset + a - pg_->rank() * shard_numel_, {b - a});
    in::copy_(dst, in::view_range(e.param.detach(), a, {b - a}));
  }
  for (auto& e : entries_) {
    if (e.param.grad().defined()) e.param.autograd_meta().grad = Tensor();
    e.param.set_data(local_view(shard_, e));
  }
}

void Unit::attach() {
  // The module's hooks own the unit (it lives as long as the module); the parameters' hooks only
  // refer to it, since the unit holds the parameters.
  auto self = shared_from_this();
  module_->register_forward_pre_hook([self](nn::Module&) { self->pre_forward(); });
  module_->register_forward_hook(
      [self](nn::Module&, const std::vector<Tensor*>& outputs) { self->post_forward(outputs); });
  std::weak_ptr<Unit> weak = self;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].param.requires_grad()) continue;
    autograd::register_post_accumulate_grad_hook(entries_[i].param, [weak, i](Tensor&) {
      if (auto u = weak.lock()) u->on_grad_ready(i);
    });
  }
}

std::pair<int64_t, int64_t> Unit::local_range(const FlatEntry& e, int rank) const {
  if (rank < 0) rank = pg_->rank();
  const int64_t lo = rank * shard_numel_, hi = lo + shard_numel_;
  const int64_t a = std::max(e.offset, lo), b = std::min(e.offset + e.numel, hi);
  return b > a ? std::pair{a - e.offset, b - e.offset} : std::pair<int64_t, int64_t>{0, 0};
}

Tensor Unit::local_view(const Tensor& flat, const FlatEntry& e) const {
  auto [a, b] = local_range(e);
  const int64_t start = b > a ? e.offset + a - pg_->rank() * shard_numel_ : 0;
  return in::view_range(flat, start, {b - a});
}

// --- gather and free ---

void Unit::begin_unshard() {
  if (shard_state_ != ShardState::kSharded || entries_.empty()) return;
  const int64_t total = shard_numel_ * pg_->size();
  if (!full_.defined()) full_ = empty({total}, TensorOptions(compute_dtype_, device_));
  else full_.storage()->resize_(total * element_size(compute_dtype_));
  gather_src_ = in::to_dtype(shard_, compute_dtype_);
  gather_ = pg_->all_gather_into_tensor(full_, gather_src_);
  shard_state_ = ShardState::kGathering;
}

void Unit::wait_gather() {
  if (shard_state_ != ShardState::kGathering) return;
  gather_->wait();
  gather_.reset();
  gather_src_ = Tensor();
  shard_state_ = ShardState::kSharded;  // `full` holds the gathered values; the parameters still view shards
}

void Unit::unshard() {
  if (shard_state_ == ShardState::kUnsharded) return;
  begin_unshard();
  wait_gather();
  park_grads();
  for (auto& e : entries_) e.param.set_data(in::view_range(full_, e.offset, e.shape));
  shard_state_ = ShardState::kUnsharded;
}

void Unit::reshard() {
  wait_gather();  // a prefetch that was not used
  if (shard_state_ != ShardState::kUnsharded) return;
  for (auto& e : entries_) e.param.set_data(local_view(shard_, e));
  full_.storage()->resize_(0);
  shard_state_ = ShardState::kSharded;
  if (!reduce_) restore_parked_grads();  // else finish_reduce adds them to the new gradients
}

void Unit::park_grads() {
  bool any = false;
  for (auto& e : entries_) any = any || e.param.grad().defined();
  if (!any) return;
  parked_ = zeros({shard_numel_}, TensorOptions(dtype_, device_));
  for (auto& e : entries_) {
    const Tensor& g = e.param.grad();
    if (!g.defined()) continue;
    Tensor dst = local_view(parked_, e);
    in::add_(dst, g);
    e.param.autograd_meta().grad = Tensor();
  }
}

void Unit::restore_parked_grads() {
  if (!parked_.defined()) return;
  set_sharded_grads(parked_);
  parked_ = Tensor();
}

void Unit::set_sharded_grads(const Tensor& grad) {
  for (auto& e : entries_)
    if (e.param.requires_grad()) e.param.autograd_meta().grad = local_view(grad, e);
}

// --- forward ---

void Unit::pre_forward() {
  if (is_root() && !ctx->order_fixed) {
    ctx->recording = true;
    ctx->order.clear();
  }
  if (ctx->recording) {
    index_ = ctx->order.size();
    ctx->order.push_back(this);
  }
  unshard();
  // Prefetch: the next unit's all-gather runs while this one computes.
  if (ctx->order_fixed && index_ + 1 < ctx->order.size() && ctx->order[index_] == this)
    ctx->order[index_ + 1]->begin_unshard();
}

void Unit::post_forward(const std::vector<Tensor*>& outputs) {
  if (is_root() && ctx->recording) {
    ctx->recording = false;
    ctx->order_fixed = true;
  }
  bool graph = false;
  if (GradMode::is_enabled()) {
    std::weak_ptr<Unit> weak = weak_from_this();
    for (Tensor* out : outputs) {
      if (!out->defined() || !out->requires_grad()) continue;
      graph = true;
      // Identity whose backward gathers the parameters before the unit's own nodes run.
      *out = autograd::record("fully_shard.pre_backward", out->detach(), {*out}, [weak](const Tensor& g) {
        if (auto u = weak.lock()) u->pre_backward();
        return std::vector<Tensor>{g};
      });
    }
  }
  if (!graph || (!is_root() && options_.reshard_after_forward)) reshard();
}

// --- backward ---

void Unit::sync_pass() {
  const uint64_t pass = autograd::backward_pass_id();
  if (pass == pass_) return;
  pass_ = pass;
  training_ = TrainingState::kIdle;
  ready_ = 0;
}

bool Unit::advance(TrainingState to) {
  sync_pass();
  if (training_ >= to) return false;
  training_ = to;
  return true;
}

void Unit::pre_backward() {
  if (!advance(TrainingState::kPreBackward)) return;
  ctx->ensure_callback();
  unshard();
  grads_as_flat_views();
  if (ctx->order_fixed && index_ > 0 && index_ < ctx->order.size() && ctx->order[index_] == this) {
    Unit* prev = ctx->order[index_ - 1];
    if (!prev->is_root()) prev->begin_unshard();
  }
}

void Unit::on_grad_ready(size_t entry) {
  if (!autograd::in_backward()) return;
  sync_pass();
  ctx->ensure_callback();
  if (shard_state_ == ShardState::kUnsharded) take_grad(entries_[entry]);
  if (++ready_ == requiring_grad_) post_backward();
}

Tensor& Unit::flat_grad() {
  if (!flat_grad_.defined()) {
    // The unit's full gradient, flat, in the reduce dtype (padding and unused parameters: zeros). The
    // reduce-scatter still in flight finishes first, so that its input is freed before this one exists.
    if (ctx->reducing && ctx->reducing != this) ctx->reducing->finish_reduce();
    flat_grad_ = accumulated_.defined() ? accumulated_
                                        : zeros({shard_numel_ * pg_->size()}, TensorOptions(reduce_dtype_, device_));
    accumulated_ = Tensor();
  }
  return flat_grad_;
}

void Unit::grads_as_flat_views() {
  // A .grad of another dtype than its parameter's would not be PyTorch's contract: copy instead.
  if (requiring_grad_ == 0 || reduce_dtype_ != compute_dtype_) return;
  Tensor& flat = flat_grad();
  for (auto& e : entries_)
    if (e.param.requires_grad() && !e.param.grad().defined())
      e.param.autograd_meta().grad = in::view_range(flat, e.offset, e.shape);
}

void Unit::take_grad(FlatEntry& e) {
  const Tensor& g = e.param.grad();
  if (!g.defined()) return;
  NoGradGuard no_grad;
  Tensor& flat = flat_grad();
  if (g.storage() != flat.storage()) {
    Tensor dst = in::view_range(flat, e.offset, {e.numel});
    in::add_(dst, in::to_dtype(in::reshape(g, {e.numel}), reduce_dtype_));
  }
  e.param.autograd_meta().grad = Tensor();
}

void Unit::post_backward() {
  if (shard_state_ != ShardState::kUnsharded || !advance(TrainingState::kPostBackward)) return;
  NoGradGuard no_grad;
  for (auto& e : entries_) take_grad(e);  // those whose hooks did not run (none, or unused parameters)
  Tensor flat = std::move(flat_grad());  // defined even when no parameter got a gradient
  flat_grad_ = Tensor();
  if (!requires_gradient_sync) {
    accumulated_ = flat;
    reshard();
    return;
  }
  if (ctx->reducing && ctx->reducing != this) ctx->reducing->finish_reduce();
  reduce_in_ = flat;
  reduce_out_ = empty({shard_numel_}, TensorOptions(reduce_dtype_, device_));
  reduce_ = pg_->reduce_scatter_tensor(reduce_out_, reduce_in_, ReduceOp::AVG);
  ctx->reducing = this;
  reshard();
}

void Unit::finish_backward() {
  sync_pass();
  const bool took_part = training_ != TrainingState::kIdle || ready_ > 0;
  if (took_part && training_ != TrainingState::kPostBackward) post_backward();
  finish_reduce();
}

void Unit::finish_reduce() {
  if (ctx->reducing == this) ctx->reducing = nullptr;
  if (!reduce_) return;
  reduce_->wait();
  reduce_.reset();
  reduce_in_ = Tensor();
  Tensor grad = reduce_dtype_ == dtype_ ? reduce_out_ : in::to_dtype(reduce_out_, dtype_);
  reduce_out_ = Tensor();
  if (parked_.defined()) {
    in::add_(grad, parked_);
    parked_ = Tensor();
  }
  set_sharded_grads(grad);
}

std::vector<std::shared_ptr<Unit>> units_in(nn::Module& module) {
  std::vector<std::shared_ptr<Unit>> out;
  std::vector<nn::Module*> stack{&module};
  while (!stack.empty()) {
    nn::Module* m = stack.back();
    stack.pop_back();
    if (auto u = fsdp_unit_of(*m)) out.push_back(u);
    auto children = m->named_children();
    for (auto it = children.rbegin(); it != children.rend(); ++it) stack.push_back(it->second.get());
  }
  return out;
}

}  // namespace lockstep::dist::fsdp
