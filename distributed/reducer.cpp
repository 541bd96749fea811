// Reducer: bucketed, overlapped gradient all-reduce for DistributedDataParallel.
#include "distributed/reducer.h"

#include <chrono>
#include <map>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::dist {

static Tensor slot_view(const Tensor& flat, int64_t offset, const Tensor& param) {
  return internal::view_range(flat, offset, param.shape());
}

Reducer::Reducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<ProcessGroup> pg,
                 ReducerOptions options)
    : params_(std::move(params)), pg_(std::move(pg)), options_(options) {
  LOCKSTEP_CHECK(pg_, "DistributedDataParallel: no process group (call init_process_group first)");
  LOCKSTEP_CHECK(options_.bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
                 options_.bucket_cap_mb);
  build_buckets();
  ready_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(autograd::register_post_accumulate_grad_hook(params_[i].second,
                                                                  [this, i](Tensor&) { on_gradient_ready(i); }));
}

Reducer::~Reducer() {
  for (size_t i = 0; i < params_.size(); ++i) autograd::remove_hook(params_[i].second, hooks_[i]);
}

void Reducer::build_buckets() {
  slots_.resize(params_.size());
  // One open bucket per (dtype, device); buckets are numbered in the order they are opened, which
  // is the same on every rank, and that is the order they are launched in.
  std::map<std::pair<int, std::string>, size_t> open;
  std::vector<int64_t> sizes;
  const double mib = 1024.0 * 1024.0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k].second;
    auto key = std::make_pair(static_cast<int>(p.dtype()), p.device().str());
    auto it = open.find(key);
    if (it == open.end()) {
      it = open.emplace(key, buckets_.size()).first;
      buckets_.emplace_back();
      sizes.push_back(0);
    }
    size_t b = it->second;
    slots_[k] = Slot{k, b, sizes[b]};
    buckets_[b].slots.push_back(k);
    sizes[b] += p.numel();
    double cap = (b == 0 ? options_.first_bucket_cap_mb : options_.bucket_cap_mb) * mib;
    if (sizes[b] * static_cast<double>(element_size(p.dtype())) >= cap) open.erase(it);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor& first = params_[buckets_[b].slots[0]].second;
    buckets_[b].flat = zeros({sizes[b]}, {first.dtype(), first.device()});
  }
}

void Reducer::register_comm_hook(CommHook hook) {
  LOCKSTEP_CHECK(hook, "register_comm_hook: the hook is empty");
  LOCKSTEP_CHECK(!comm_hook_, "register_comm_hook: a communication hook is already registered (DDP takes one, as "
                 "PyTorch's)");
  LOCKSTEP_CHECK(pass_ == 0, "register_comm_hook: register the hook before the first backward");
  comm_hook_ = std::move(hook);
}

GradBucket Reducer::grad_bucket(size_t index) const {
  const Bucket& b = buckets_[index];
  std::vector<Tensor> grads, params;
  for (size_t i : b.slots) {
    grads.push_back(slot_view(b.flat, slots_[i].offset, params_[i].second));
    params.push_back(params_[i].second);
  }
  return GradBucket(index, index + 1 == buckets_.size(), b.flat, std::move(grads), std::move(params));
}

std::vector<std::vector<size_t>> Reducer::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_) out.push_back(b.slots);
  return out;
}

void Reducer::reset_for_backward() {
  pass_ = autograd::backward_pass_id();
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = b.slots.size();
    b.work.reset();
    b.future.reset();
  }
  next_to_launch_ = 0;
  autograd::queue_callback([this] { finalize(); });
}

void Reducer::on_gradient_ready(size_t i) {
  if (!require_sync_ || pg_->size() == 1) return;  // one rank: the local gradient is the average
  if (pass_ != autograd::backward_pass_id()) reset_for_backward();
  const Slot& s = slots_[i];
  Bucket& b = buckets_[s.bucket];
  const Tensor& p = params_[i].second;
  Tensor view = slot_view(b.flat, s.offset, p);
  if (p.grad().data_ptr() != view.data_ptr()) internal::copy_(view, p.grad());
  // As bucket views, the gradients point at their slots now, not at finalize: the copies backward
  // made are freed one by one instead of all being alive at the end of the first backward.
  if (options_.gradient_as_bucket_view) params_[i].second.autograd_meta().grad = view;
  ready_[i] = true;
  --b.pending;
  launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  // Strictly in bucket order, so every rank issues the same sequence of collectives.
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    Bucket& b = buckets_[next_to_launch_++];
    if (comm_hook_) {
      GradBucket bucket = grad_bucket(next_to_launch_ - 1);
      b.future = comm_hook_(bucket);
      LOCKSTEP_CHECK(b.future, "DistributedDataParallel: the communication hook returned no future for bucket ",
                     next_to_launch_ - 1);
      continue;
    }
    internal::mul_(b.flat, 1.0 / pg_->size());  // sum of gradients / world size = the average
    b.work = pg_->all_reduce(b.flat, ReduceOp::SUM);
  }
}

void Reducer::finalize() {
  std::vector<std::string> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!ready_[i]) unused.push_back(params_[i].first);
  if (!unused.empty()) {
    LOCKSTEP_CHECK(options_.find_unused_parameters, "DistributedDataParallel: parameter(s) received no gradient in "
                   "this backward pass: ", unused, ". Every parameter must take part in the loss, or construct DDP "
                   "with find_unused_parameters = true");
    // Unused here: contribute zeros, so ranks that did use the parameter still get the average.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (ready_[i]) continue;
      const Slot& s = slots_[i];
      Tensor view = slot_view(buckets_[s.bucket].flat, s.offset, params_[i].second);
      internal::fill_(view, 0.0);
      ready_[i] = true;
      --buckets_[s.bucket].pending;
    }
    launch_ready_buckets();
  }
  last_wait_seconds_ = 0;
  for (auto& b : buckets_) {
    auto t0 = std::chrono::steady_clock::now();
    if (b.future) {
      const Tensor& reduced = b.future->value();
      LOCKSTEP_CHECK(reduced.defined() && reduced.shape() == b.flat.shape() && reduced.dtype() == b.flat.dtype(),
                     "DistributedDataParallel: the communication hook's result for bucket ", &b - buckets_.data(),
                     " is ", reduced.defined() ? reduced.shape() : Shape{}, " ",
                     reduced.defined() ? reduced.dtype() : b.flat.dtype(), ", not the bucket's ", b.flat.shape(), " ",
                     b.flat.dtype());
      if (reduced.data_ptr() != b.flat.data_ptr()) internal::copy_(b.flat, reduced);
    } else {
      b.work->wait();
    }
    last_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (size_t i : b.slots) {
      Tensor& p = params_[i].second;
      Tensor view = slot_view(b.flat, slots_[i].offset, p);
      if (options_.gradient_as_bucket_view) {
        // The bucket itself becomes .grad: later backwards accumulate straight into it.
        p.autograd_meta().grad = view;
      } else if (p.grad().defined()) {
        Tensor g = p.grad();
        internal::copy_(g, view);
      } else {
        p.autograd_meta().grad = internal::clone(view);
      }
    }
  }
}

}  // namespace lockstep::dist
