// ProcessGroupGloo: connecting the links, choosing the transport (choose_transport: the one place that
// decides what runs a CPU collective), and the collectives handed to it through the work queue.
#include "distributed/gloo/process_group_gloo.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "common/env.h"
#include "distributed/debug.h"
#include "distributed/gloo/direct_mesh.h"
#include "distributed/net/socket.h"
#include "distributed/shm/host.h"
#include "distributed/shm/shm_group.h"
#include "distributed/store/prefix_store.h"

namespace lockstep::dist {

namespace {

// Distinguishes group instances in the store (see the header).
std::atomic<uint64_t> g_instances{0};

enum class TransportKind { kTcp, kShm, kTwoLevel };

// What moves this group's collectives, from where its ranks live (see the header): shared memory when
// every rank shares one host; two levels when there are several hosts and some have several ranks;
// else TCP (one rank per host, shared memory off on any rank, or a group of one).
TransportKind choose_transport(const shm::HostLayout& layout) {
  if (!layout.enabled) return TransportKind::kTcp;
  const bool any_shared = std::any_of(layout.ranks_on.begin(), layout.ranks_on.end(),
                                      [](const std::vector<int>& ranks) { return ranks.size() > 1; });
  if (!any_shared) return TransportKind::kTcp;
  return layout.ranks_on.size() == 1 ? TransportKind::kShm : TransportKind::kTwoLevel;
}

GlooOptions::Algorithm algorithm_from_env(GlooOptions::Algorithm configured) {
  const auto algo = env_string("LOCKSTEP_GLOO_ALLREDUCE");
  if (!algo || configured != GlooOptions::Algorithm::kAuto) return configured;
  const std::string& a = *algo;
  LOCKSTEP_CHECK(a == "auto" || a == "exchange" || a == "ring" || a == "gloo_ring" || a == "gloo_bcube",
                 "ProcessGroupGloo: LOCKSTEP_GLOO_ALLREDUCE is \"", a,
                 "\"; expected auto, exchange, ring, gloo_ring or gloo_bcube");
  return a == "exchange"     ? GlooOptions::Algorithm::kExchange
         : a == "ring"       ? GlooOptions::Algorithm::kRing
         : a == "gloo_ring"  ? GlooOptions::Algorithm::kGlooRing
         : a == "gloo_bcube" ? GlooOptions::Algorithm::kGlooBcube
                             : GlooOptions::Algorithm::kAuto;
}

}  // namespace

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout)
    : ProcessGroupGloo(std::move(store), rank, size, [&] {
        Options options;
        options.timeout = timeout;
        return options;
      }()) {}

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, Options options)
    : ProcessGroup(rank, size), options_(std::move(options)) {
  LOCKSTEP_CHECK(store != nullptr, "ProcessGroupGloo: the store is null");
  LOCKSTEP_CHECK(options_.timeout.count() > 0, "ProcessGroupGloo: the timeout must be positive, got ",
                 options_.timeout.count(), " ms");
  options_.allreduce_algorithm = algorithm_from_env(options_.allreduce_algorithm);
  if (auto shm = env_string("LOCKSTEP_SHM")) {
    LOCKSTEP_CHECK(*shm == "0" || *shm == "1", "ProcessGroupGloo: LOCKSTEP_SHM is \"", *shm,
                   "\"; expected 0 (TCP only) or 1 (shared memory between the ranks of a host, the default)");
    if (*shm == "0") options_.shared_memory = false;
  }
  options_.shm_slot_bytes = static_cast<size_t>(
      env_int("LOCKSTEP_SHM_SLOT_BYTES", static_cast<long long>(options_.shm_slot_bytes), 4096, 1LL << 30));
  options_.shm_spin = std::chrono::microseconds(
      env_int("LOCKSTEP_SHM_SPIN_US", static_cast<long long>(options_.shm_spin.count()), 0, 10'000'000));
  LOCKSTEP_CHECK(options_.shm_slot_bytes % 4096 == 0, "ProcessGroupGloo: shm_slot_bytes must be a multiple of 4096, got ",
                 options_.shm_slot_bytes);
  auto prefixed = std::make_shared<PrefixStore>("gloo/" + std::to_string(g_instances++), std::move(store));
  enable_debug_checks(prefixed, options_.timeout);  // before connecting: a bad LOCKSTEP_DISTRIBUTED_DEBUG fails fast

  // gloo's device listens on: options.hostname; else GLOO_SOCKET_IFNAME's interface; else the local
  // address towards the master; else 127.0.0.1.
  std::string hostname, iface;
  if (!options_.hostname.empty()) {
    hostname = options_.hostname;
  } else if (auto ifname = env_string("GLOO_SOCKET_IFNAME")) {
    iface = *ifname;
  } else {
    std::string master = options_.master_addr;
    if (master.empty()) master = env_string("MASTER_ADDR").value_or("");
    hostname = master.empty() ? "" : local_address_towards(master);
    if (hostname.empty()) hostname = "127.0.0.1";
  }
  address_ = hostname.empty() ? "interface " + iface : hostname;

  try {
    gloo_ = std::make_unique<GlooTransport>(prefixed, rank, size, hostname, iface, options_.timeout,
                                            options_.allreduce_algorithm == Options::Algorithm::kGlooBcube, scratch_);
    const std::string mesh_host = hostname.empty() ? interface_address(iface) : hostname;
    LOCKSTEP_CHECK(!mesh_host.empty(), "interface ", iface, " has no IPv4 or global IPv6 address");
    mesh_ = std::make_unique<DirectMesh>(*prefixed, rank, size, mesh_host, options_.timeout, options_.token);
    setup_shared_memory(*prefixed, mesh_host);
    // Once any rank returns, every rank has connected: a peer that is destroyed right away cannot
    // cut a connection another rank is still setting up. (Tag 0; the collectives number from 1.)
    if (size > 1) gloo_->barrier(0);
  } catch (const std::exception& e) {
    fail("ProcessGroupGloo: rank ", rank, " of ", size, " could not connect to the other ranks (listening on ",
         address_, ", timeout ", detail::format_seconds(options_.timeout), "): ", e.what());
  }
  address_ = gloo_->address();
  if (rank == 0 && debug_level() != DebugLevel::Off) {
    std::fprintf(stderr, "ProcessGroupGloo: transport %s on %d ranks: %s\n", transport_->name(), size,
                 transport_->summary().c_str());
  }
  WorkQueue::Options queue;
  queue.owner = "ProcessGroupGloo";
  queue.rank = rank;
  queue.size = size;
  queue.block_sigpipe = true;  // gloo writes to its sockets from the thread running the collective
  queue_ = std::make_unique<WorkQueue>(std::move(queue));
}

ProcessGroupGloo::~ProcessGroupGloo() {
  queue_.reset();  // runs what is queued, then stops the worker
  gloo_.reset();   // closes gloo's pairs and stops its event loop, before the other links
}

std::string ProcessGroupGloo::transport() const { return transport_->name(); }

void ProcessGroupGloo::setup_shared_memory(Store& store, const std::string& mesh_host) {
  // Every rank takes part, so that one rank's LOCKSTEP_SHM=0 turns shared memory off on all of them.
  shm::HostLayout layout;
  if (size() > 1) layout = shm::exchange_host_layout(store, rank(), size(), options_.timeout, options_.shared_memory);
  const TransportKind kind = choose_transport(layout);
  if (kind == TransportKind::kTcp) {
    transport_ = std::make_unique<MeshTransport>(*mesh_, *gloo_, options_.allreduce_algorithm,
                                                 options_.allreduce_exchange_max_bytes, scratch_);
    return;
  }
  const int host = layout.host_of[rank()];
  const std::vector<int>& mine = layout.ranks_on[host];
  if (mine.size() > 1) {
    PrefixStore host_store("shm/" + std::to_string(host), std::shared_ptr<Store>(&store, [](Store*) {}));
    const int local = static_cast<int>(std::find(mine.begin(), mine.end(), rank()) - mine.begin());
    shm_ = std::make_unique<shm::ShmGroup>(host_store, mine, local,
                                           shm::ShmOptions{options_.shm_slot_bytes, options_.timeout, options_.shm_spin,
                                                           options_.token});
  }
  if (kind == TransportKind::kShm) {
    transport_ = std::make_unique<ShmTransport>(*shm_);
    return;
  }
  const int hosts = static_cast<int>(layout.ranks_on.size());
  if (mine[0] == rank()) {
    PrefixStore leader_store("leaders/", std::shared_ptr<Store>(&store, [](Store*) {}));
    leaders_ = std::make_unique<DirectMesh>(leader_store, host, hosts, mesh_host, options_.timeout, options_.token);
  }
  transport_ = std::make_unique<TwoLevelTransport>(rank(), size(), shm_.get(), leaders_.get(), std::move(layout.host_of),
                                                   std::move(layout.ranks_on), *gloo_,
                                                   options_.allreduce_algorithm, options_.allreduce_exchange_max_bytes,
                                                   scratch_);
}

void ProcessGroupGloo::check_tensor(const Tensor& t, const char* op) const {
  LOCKSTEP_CHECK(t.device().is_cpu(), op, ": the gloo backend takes CPU tensors, got one on ", t.device(),
                 " (use the nccl backend for CUDA tensors, or move the tensor with .to(Device::cpu()))");
}

bool ProcessGroupGloo::reduces_avg() const { return transport_->fuses_avg(); }

std::shared_ptr<Work> ProcessGroupGloo::do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) {
  return queue_->submit({"all_reduce", tensor.dtype(), tensor.numel(), reduce_op_name(op)},
                        [this, tensor, op](uint32_t tag) { transport_->all_reduce(tensor, op, tag); }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_broadcast(Tensor& tensor, int root, bool async_op) {
  return queue_->submit({"broadcast", tensor.dtype(), tensor.numel(), nullptr, root},
                        [this, tensor, root](uint32_t tag) { transport_->broadcast(tensor, root, tag); }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                                      bool async_op) {
  return queue_->submit({"all_gather", input.dtype(), input.numel()},
                        [this, outputs, input](uint32_t tag) { transport_->all_gather(outputs, input, tag); },
                        async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                                          ReduceOp op, bool async_op) {
  return queue_->submit({"reduce_scatter", output.dtype(), output.numel(), reduce_op_name(op)},
                        [this, output, inputs, op](uint32_t tag) {
    transport_->reduce_scatter(output, inputs, op, tag);
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_all_gather_into_tensor(Tensor& output, const Tensor& input,
                                                                  bool async_op) {
  return queue_->submit({"all_gather_into_tensor", input.dtype(), input.numel()}, [this, output, input](uint32_t tag) {
    transport_->all_gather_into_tensor(output, input, tag);
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                                 bool async_op) {
  return queue_->submit({"reduce_scatter_tensor", output.dtype(), output.numel(), reduce_op_name(op)},
                        [this, output, input, op](uint32_t tag) {
    transport_->reduce_scatter_tensor(output, input, op, tag);
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_barrier(bool async_op) {
  return queue_->submit({"barrier"}, [this](uint32_t tag) { transport_->barrier(tag); }, async_op);
}

}  // namespace lockstep::dist
