// DistributedDataParallel: replica checks, initial broadcast, and the Reducer hookup.
#include "distributed/ddp.h"

#include <sstream>

#include "autograd/grad_mode.h"
#include "distributed/init.h"
#include "distributed/sync_batch_norm.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::dist {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options,
                                                 std::shared_ptr<ProcessGroup> process_group)
    : nn::Module("DistributedDataParallel"), options_(std::move(options)) {
  LOCKSTEP_CHECK(module, "DistributedDataParallel: module is null");
  bind_forward<DistributedDataParallel>();  // ddp(x) on a DDP built without a holder
  pg_ = process_group ? std::move(process_group) : (is_initialized() ? default_pg() : nullptr);
  LOCKSTEP_CHECK(pg_, "DistributedDataParallel: no process group; call init_process_group first");
  module_ = register_module("module", std::move(module));  // state_dict keys read "module.fc.weight", as PyTorch
  convert_sync_batchnorm(*module_, pg_);  // SyncBatchNorm layers without a group of their own use DDP's
  for (int id : options_.device_ids) {
    for (auto& [name, p] : module_->named_parameters())
      LOCKSTEP_CHECK(p.device() == Device::cuda(id), "DistributedDataParallel: device_ids = [", id, "] but parameter '",
                     name, "' is on ", p.device(), " (move the model with module->to(Device::cuda(", id, ")) first)");
  }
  verify_same_parameters();
  broadcast_state(true);
  std::vector<std::pair<std::string, Tensor>> params;
  for (auto& [name, p] : module_->named_parameters())
    if (p.requires_grad()) params.emplace_back(name, p);
  ReducerOptions ro;
  ro.bucket_cap_mb = options_.bucket_cap_mb;
  ro.first_bucket_cap_mb = options_.first_bucket_cap_mb;
  ro.find_unused_parameters = options_.find_unused_parameters;
  ro.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  reducer_ = std::make_unique<Reducer>(std::move(params), pg_, ro);
}

void DistributedDataParallel::before_forward() {
  if (options_.broadcast_buffers && pg_->size() > 1) broadcast_state(false);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  before_forward();
  return module_->forward(input);
}

void DistributedDataParallel::broadcast_state(bool parameters) {
  if (pg_->size() == 1) return;
  NoGradGuard no_grad;
  auto tensors = parameters ? module_->state_dict() : module_->named_buffers();
  for (auto& [_, t] : tensors) pg_->broadcast(t, 0)->wait();
}

// Every rank encodes "name dtype [shape]" per parameter as int64 characters; rank 0's list is
// broadcast and compared, and a MIN all-reduce of the verdict makes every rank fail together.
void DistributedDataParallel::verify_same_parameters() {
  if (pg_->size() == 1) return;
  NoGradGuard no_grad;
  std::vector<std::string> mine;
  std::string joined;
  for (auto& [name, t] : module_->named_parameters()) {
    std::ostringstream os;
    os << name << ' ' << t.dtype() << ' ' << t.shape();
    mine.push_back(os.str());
    joined += os.str() + '\n';
  }
  Device dev = module_->parameters().empty() ? Device::cpu() : module_->parameters()[0].device();
  Tensor len = tensor(std::vector<int64_t>{static_cast<int64_t>(joined.size())}, {}, dev);
  pg_->all_reduce(len, ReduceOp::MAX)->wait();
  int64_t n = len.item<int64_t>();
  std::vector<int64_t> chars(n + 1, 0);
  chars[0] = static_cast<int64_t>(joined.size());
  for (size_t i = 0; i < joined.size(); ++i) chars[i + 1] = static_cast<unsigned char>(joined[i]);
  Tensor buf = tensor(chars, {}, dev);
  pg_->broadcast(buf, 0)->wait();
  std::vector<int64_t> got = buf.to_vector<int64_t>();
  std::string theirs;
  for (int64_t i = 0; i < got[0]; ++i) theirs += static_cast<char>(got[i + 1]);

  std::string difference;
  if (theirs != joined) {
    std::vector<std::string> ref;
    std::istringstream is(theirs);
    for (std::string line; std::getline(is, line);) ref.push_back(line);
    size_t k = 0;
    while (k < ref.size() && k < mine.size() && ref[k] == mine[k]) ++k;
    difference = "parameter " + std::to_string(k) + ": rank 0 has '" + (k < ref.size() ? ref[k] : "(none)") +
                 "', rank " + std::to_string(pg_->rank()) + " has '" + (k < mine.size() ? mine[k] : "(none)") + "'";
  }
  Tensor ok = tensor(std::vector<int64_t>{difference.empty() ? 1 : 0}, {}, dev);
  pg_->all_reduce(ok, ReduceOp::MIN)->wait();
  LOCKSTEP_CHECK(difference.empty(), "DistributedDataParallel: the model differs across ranks: ", difference);
  LOCKSTEP_CHECK(ok.item<int64_t>() == 1, "DistributedDataParallel: the model differs across ranks (another rank "
                 "reported the first difference)");
}

}  // namespace lockstep::dist
