// ProcessGroupGloo: gloo's TCP full mesh, one worker thread, and the collectives on raw data pointers.
#include "distributed/gloo/process_group_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/types.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "distributed/gloo/algorithms.h"
#include "distributed/gloo/direct_mesh.h"
#include "distributed/gloo/gloo_store_adapter.h"
#include "distributed/store/prefix_store.h"
#include "distributed/net/socket.h"
#include "distributed/shm/host.h"
#include "distributed/shm/shm_group.h"
#include "common/env.h"

namespace lockstep::dist {

namespace {

// Blocks SIGPIPE in the calling thread for a scope, and in the threads it starts meanwhile: a write to
// a peer that died then fails with EPIPE, which gloo reports, instead of killing the process.
class BlockSigpipe {
 public:
  BlockSigpipe() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &set, &previous_);
  }
  ~BlockSigpipe() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  BlockSigpipe(const BlockSigpipe&) = delete;
  BlockSigpipe& operator=(const BlockSigpipe&) = delete;

 private:
  sigset_t previous_;
};

// Distinguishes group instances in the store (see the header).
std::atomic<uint64_t> g_instances{0};

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
  if (const char* algo = std::getenv("LOCKSTEP_GLOO_ALLREDUCE");
      algo && *algo && options_.allreduce_algorithm == Options::Algorithm::kAuto) {
    const std::string a = algo;
    LOCKSTEP_CHECK(a == "auto" || a == "exchange" || a == "ring" || a == "gloo_ring" || a == "gloo_bcube",
                   "ProcessGroupGloo: LOCKSTEP_GLOO_ALLREDUCE is \"", a,
                   "\"; expected auto, exchange, ring, gloo_ring or gloo_bcube");
    options_.allreduce_algorithm = a == "exchange"     ? Options::Algorithm::kExchange
                                   : a == "ring"       ? Options::Algorithm::kRing
                                   : a == "gloo_ring"  ? Options::Algorithm::kGlooRing
                                   : a == "gloo_bcube" ? Options::Algorithm::kGlooBcube
                                                       : Options::Algorithm::kAuto;
  }
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

  gloo::transport::tcp::attr attr;
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (!options_.hostname.empty()) {
    attr.hostname = options_.hostname;
  } else if (ifname && *ifname) {
    attr.iface = ifname;
  } else {
    std::string master = options_.master_addr;
    if (master.empty() && std::getenv("MASTER_ADDR")) master = std::getenv("MASTER_ADDR");
    attr.hostname = master.empty() ? "" : local_address_towards(master);
    if (attr.hostname.empty()) attr.hostname = "127.0.0.1";
  }
  address_ = attr.hostname.empty() ? "interface " + attr.iface : attr.hostname;

  try {
    BlockSigpipe no_sigpipe;  // in gloo's event-loop thread, which the device starts
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options_.timeout);
    GlooStoreAdapter adapter(prefixed);
    const std::vector<PeerSockets::Socket> sockets_before = PeerSockets::snapshot();
    context->connectFullMesh(adapter, device_);
    context_ = std::move(context);
    peer_sockets_.identify(*prefixed, rank, size, sockets_before);
    const std::string mesh_host = attr.hostname.empty() ? interface_address(attr.iface) : attr.hostname;
    LOCKSTEP_CHECK(!mesh_host.empty(), "interface ", attr.iface, " has no IPv4 or global IPv6 address");
    mesh_ = std::make_unique<DirectMesh>(*prefixed, rank, size, mesh_host, options_.timeout, options_.token);
    if (size > 1) setup_shared_memory(*prefixed, mesh_host);
    // Once any rank returns, every rank has connected: a peer that is destroyed right away cannot
    // cut a connection another rank is still setting up.
    if (size > 1) {
      gloo::BarrierOptions barrier(context_);
      barrier.setTag(next_tag_++);
      barrier.setTimeout(options_.timeout);
      gloo::barrier(barrier);
    }
  } catch (const std::exception& e) {
    fail("ProcessGroupGloo: rank ", rank, " of ", size, " could not connect to the other ranks (listening on ",
         address_, ", timeout ", detail::format_seconds(options_.timeout), "): ", e.what());
  }
  address_ = device_->str();
  BlockSigpipe no_sigpipe;  // in the worker, which writes to the sockets too
  worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  context_.reset();  // closes the pairs' sockets
  device_.reset();   // stops gloo's event loop thread
}

void ProcessGroupGloo::setup_shared_memory(Store& store, const std::string& mesh_host) {
  // Every rank takes part, so that one rank's LOCKSTEP_SHM=0 turns shared memory off on all of them.
  shm::HostLayout layout = shm::exchange_host_layout(store, rank(), size(), options_.timeout, options_.shared_memory);
  if (!layout.enabled) return;
  const int host = layout.host_of[rank()];
  const std::vector<int>& mine = layout.ranks_on[host];
  const bool any_shared = std::any_of(layout.ranks_on.begin(), layout.ranks_on.end(),
                                      [](const std::vector<int>& r) { return r.size() > 1; });
  if (!any_shared) return;  // one rank per host: TCP alone
  if (mine.size() > 1) {
    PrefixStore host_store("shm/" + std::to_string(host), std::shared_ptr<Store>(&store, [](Store*) {}));
    const int local = static_cast<int>(std::find(mine.begin(), mine.end(), rank()) - mine.begin());
    shm_ = std::make_unique<shm::ShmGroup>(host_store, mine, local,
                                           shm::ShmOptions{options_.shm_slot_bytes, options_.timeout, options_.shm_spin,
                                                           options_.token});
  }
  const int hosts = static_cast<int>(layout.ranks_on.size());
  if (hosts > 1 && mine[0] == rank()) {
    PrefixStore leader_store("leaders/", std::shared_ptr<Store>(&store, [](Store*) {}));
    leaders_ = std::make_unique<DirectMesh>(leader_store, host, hosts, mesh_host, options_.timeout, options_.token);
  }
  host_of_ = std::move(layout.host_of);
  ranks_on_ = std::move(layout.ranks_on);
  transport_ = hosts > 1 ? "shm+tcp" : "shm";
}

namespace {

// DirectMesh's errors on the leaders' mesh name leader indices: say which ranks those are.
[[noreturn]] void rethrow_between_leaders(const PeerError& e, const std::vector<std::vector<int>>& ranks_on) {
  std::string who;
  for (size_t h = 0; h < ranks_on.size(); ++h) {
    who += lockstep::detail::str_cat(h ? ", " : "", "rank ", h, " there is rank ", ranks_on[h][0]);
  }
  throw PeerError(lockstep::detail::str_cat("between the hosts' leaders (", who, "): ", e.what()));
}

}  // namespace

template <typename T>
void ProcessGroupGloo::two_level_all_reduce(T* data, size_t n, ReduceOp op, uint32_t tag) {
  // Sums within each host, across the leaders, then the leader's result to its host; AVG divides at
  // the end, on bits every rank has alike.
  const ReduceOp partial = op == ReduceOp::AVG ? ReduceOp::SUM : op;
  const auto reduce = detail::reduce_fn<T>(partial);
  if (shm_) shm_->all_reduce(data, n, dtype_of<T>::value, partial, 1);
  if (leaders_) {
    try {
      const size_t bytes = n * sizeof(T);
      const int H = leaders_->size();
      if (bytes * (H - 1) <= options_.allreduce_exchange_max_bytes) {
        detail::exchange_all_reduce<T>(*leaders_, data, n, reduce, tag, static_cast<T*>(scratch(bytes * (H - 1))));
      } else {
        detail::ring_all_reduce<T>(*leaders_, data, n, reduce, tag, static_cast<T*>(scratch((n / H + 1) * sizeof(T))));
      }
    } catch (const PeerError& e) {
      rethrow_between_leaders(e, ranks_on_);
    }
  }
  if (shm_) shm_->broadcast(data, n * sizeof(T), 0);
  if (op == ReduceOp::AVG) detail::divide(data, n, size());
}

void ProcessGroupGloo::two_level_broadcast(void* data, size_t bytes, int root, uint32_t tag) {
  const int root_host = host_of_[root], host = host_of_[rank()];
  const std::vector<int>& on_root_host = ranks_on_[root_host];
  // The root's host first, so that its leader holds the data; then the leaders; then the other hosts.
  if (shm_ && host == root_host) {
    shm_->broadcast(data, bytes, static_cast<int>(std::find(on_root_host.begin(), on_root_host.end(), root) -
                                                  on_root_host.begin()));
  }
  if (leaders_) {
    try {
      std::vector<DirectMesh::Message> messages;
      if (host == root_host) {
        for (int h = 0; h < leaders_->size(); ++h) {
          if (h != host) messages.push_back({h, data, bytes, nullptr, 0, true, false});
        }
      } else {
        messages.push_back({root_host, nullptr, 0, data, bytes, false, true});
      }
      leaders_->transfer(messages, tag);
    } catch (const PeerError& e) {
      rethrow_between_leaders(e, ranks_on_);
    }
  }
  if (shm_ && host != root_host) shm_->broadcast(data, bytes, 0);
}

void ProcessGroupGloo::two_level_barrier(uint32_t tag) {
  if (shm_) shm_->barrier();
  if (leaders_) {
    try {
      leaders_->exchange(nullptr, nullptr, 0, tag);
    } catch (const PeerError& e) {
      rethrow_between_leaders(e, ranks_on_);
    }
  }
  if (shm_) shm_->barrier();
}

void ProcessGroupGloo::check_tensor(const Tensor& t, const char* op) const {
  LOCKSTEP_CHECK(t.device().is_cpu(), op, ": the gloo backend takes CPU tensors, got one on ", t.device(),
                 " (use the nccl backend for CUDA tensors, or move the tensor with .to(Device::cpu()))");
}

std::shared_ptr<Work> ProcessGroupGloo::enqueue(Describe what, std::function<void(uint32_t tag)> run, bool async_op) {
  Task task;
  std::shared_ptr<Work> work;
  bool inline_run = false;
  {
    std::lock_guard lock(mu_);
    LOCKSTEP_CHECK(!stop_, "ProcessGroupGloo: ", what.op, " on a group being destroyed");
    task = Task{std::make_shared<Work>(what.op, ++seq_), what, std::move(run), next_tag_++};
    // A blocking call with nothing queued or running: run it here. The worker stays asleep, and
    // (through inline_running_) keeps off the queue until it is done, so collectives still run one
    // at a time in the order they were issued.
    inline_run = !async_op && queue_.empty() && !worker_running_ && !inline_running_;
    if (inline_run) {
      inline_running_ = true;
    } else {
      work = task.work;
      queue_.push_back(std::move(task));
    }
  }
  if (!inline_run) {
    cv_.notify_one();
    return work;
  }
  {
    BlockSigpipe no_sigpipe;  // gloo writes to the sockets from this thread too
    execute(task);
  }
  bool wake;
  {
    std::lock_guard lock(mu_);
    inline_running_ = false;
    // The worker waits for inline_running_ to clear when work was queued meanwhile by another thread,
    // and when the group is being destroyed (it must wake to exit, or the destructor's join hangs).
    wake = !queue_.empty() || stop_;
  }
  if (wake) cv_.notify_one();
  return task.work;
}

void ProcessGroupGloo::worker_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !inline_running_ && (stop_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stopping, with every queued collective done
      task = std::move(queue_.front());
      queue_.pop_front();
      worker_running_ = true;
    }
    execute(task);
    {
      std::lock_guard lock(mu_);
      worker_running_ = false;
    }
  }
}

void ProcessGroupGloo::execute(Task& task) {
  std::exception_ptr error;
  if (!failure_.empty()) {
    error = std::make_exception_ptr(Error(lockstep::detail::str_cat(
        "ProcessGroupGloo: ", describe(task.what), " not run: an earlier collective failed on this group: ", failure_)));
  } else {
    try {
      task.run(task.tag);
    } catch (const std::exception& e) {
      // DirectMesh's errors already name the rank at fault; gloo's get explained.
      const bool named = dynamic_cast<const PeerError*>(&e) || dynamic_cast<const shm::ShmError*>(&e);
      const std::string why = named ? std::string(e.what()) : explain(e.what());
      failure_ = lockstep::detail::str_cat(describe(task.what), ": ", why);
      error = std::make_exception_ptr(Error(lockstep::detail::str_cat(
          "ProcessGroupGloo: ", describe(task.what), " failed on rank ", rank(), " of ", size(), ": ", why)));
    }
  }
  task.run = nullptr;  // releases the tensors before waiters wake
  task.work->finish(error);
}

std::string ProcessGroupGloo::describe(const Describe& d) const {
  std::string s = d.op;
  if (d.numel >= 0) s += lockstep::detail::str_cat(" (", dtype_name(d.dtype), ", ", d.numel, " elements");
  if (d.detail) s += std::string(", ") + d.detail;
  if (d.root >= 0) s += ", root " + std::to_string(d.root);
  if (d.numel >= 0) s += ")";
  return s;
}

std::string ProcessGroupGloo::explain(const std::string& gloo_error) const {
  auto has = [&](const char* part) { return gloo_error.find(part) != std::string::npos; };
  // A rank that times out closes all its connections itself: its own error is the timeout, and the
  // ranks it was connected to see it go.
  if (has("Timed out") || has("timed out") || has("Timeout") || has("timeout")) {
    return lockstep::detail::str_cat("timed out after ", detail::format_seconds(options_.timeout),
                                     " waiting for the other ranks (one may be hung, dead, or not calling this "
                                     "collective; LOCKSTEP_DISTRIBUTED_DEBUG=DETAIL names it) [gloo: ",
                                     gloo_error, "]");
  }
  const std::vector<int> lost = peer_sockets_.lost();
  if (lost.empty()) return gloo_error;
  std::string ranks;
  for (int r : lost) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  const char* how = has("closed by peer")  ? "peer closed the connection"
                    : has("reset by peer") ? "connection reset by peer"
                    : has("Broken pipe")   ? "broken pipe"
                                           : "connection error";
  return lockstep::detail::str_cat("lost connection to rank", lost.size() > 1 ? "s " : " ", ranks, " (", how,
                                   "; its process may have died or failed) [gloo: ", gloo_error, "]");
}

void* ProcessGroupGloo::scratch(size_t nbytes) {
  if (nbytes > scratch_bytes_) {
    scratch_.reset();
    scratch_.reset(new char[nbytes]);
    scratch_bytes_ = nbytes;
  }
  return scratch_.get();
}

GlooOptions::Algorithm ProcessGroupGloo::allreduce_algorithm(size_t n, size_t element_bytes) const {
  if (options_.allreduce_algorithm != Options::Algorithm::kAuto) return options_.allreduce_algorithm;
  const size_t bytes = n * element_bytes;
  if (bytes * (size() - 1) <= options_.allreduce_exchange_max_bytes) return Options::Algorithm::kExchange;
  return Options::Algorithm::kRing;
}

std::shared_ptr<Work> ProcessGroupGloo::do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) {
  // One rank: every op leaves the tensor as it is (AVG divides by 1).
  if (tensor.numel() == 0 || size() == 1) return completed_work("all_reduce");
  return enqueue({"all_reduce", tensor.dtype(), tensor.numel(), reduce_op_name(op)}, [this, tensor, op](uint32_t tag) {
    dispatch_compute(tensor.dtype(), "ProcessGroupGloo", [&](auto t) {
      using T = typename decltype(t)::type;
      T* data = static_cast<T*>(tensor.data_ptr());
      const size_t n = static_cast<size_t>(tensor.numel());
      // In place on the tensor's memory (see GlooOptions for the algorithm).
      const auto reduce = detail::reduce_fn<T>(op);
      if (transport_ == "shm") {
        shm_->all_reduce(data, n, tensor.dtype(), op, size());
        return;
      }
      if (transport_ == "shm+tcp") {
        two_level_all_reduce<T>(data, n, op, tag);
        return;
      }
      const Options::Algorithm algorithm = allreduce_algorithm(n, sizeof(T));
      if (algorithm == Options::Algorithm::kExchange) {
        detail::exchange_all_reduce<T>(*mesh_, data, n, reduce, tag, static_cast<T*>(scratch(n * sizeof(T) * (size() - 1))));
      } else if (algorithm == Options::Algorithm::kRing) {
        detail::ring_all_reduce<T>(*mesh_, data, n, reduce, tag, static_cast<T*>(scratch((n / size() + 1) * sizeof(T))));
      } else {
        gloo::AllreduceOptions opts(context_);
        opts.setOutput<T>(data, n);
        opts.setReduceFunction(reduce);
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        if (algorithm == Options::Algorithm::kGlooBcube) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
        gloo::allreduce(opts);
      }
      if (op == ReduceOp::AVG) detail::divide(data, n, size());
    });
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_broadcast(Tensor& tensor, int root, bool async_op) {
  if (tensor.numel() == 0 || size() == 1) return completed_work("broadcast");
  return enqueue({"broadcast", tensor.dtype(), tensor.numel(), nullptr, root}, [this, tensor, root](uint32_t tag) {
    if (transport_ == "shm") return shm_->broadcast(tensor.data_ptr(), tensor.nbytes(), root);
    if (transport_ == "shm+tcp") return two_level_broadcast(tensor.data_ptr(), tensor.nbytes(), root, tag);
    dispatch_compute(tensor.dtype(), "ProcessGroupGloo", [&](auto t) {
      using T = typename decltype(t)::type;
      gloo::BroadcastOptions opts(context_);
      opts.setOutput<T>(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::broadcast(opts);
    });
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                                      bool async_op) {
  if (input.numel() == 0) return completed_work("all_gather");
  return enqueue({"all_gather", input.dtype(), input.numel()}, [this, outputs, input](uint32_t tag) {
    const size_t nbytes = input.nbytes();
    if (transport_ == "shm") {
      std::vector<void*> out(outputs.size());
      for (size_t r = 0; r < outputs.size(); ++r) out[r] = outputs[r].data_ptr();
      return shm_->all_gather(input.data_ptr(), out, nbytes);
    }
    char* flat = static_cast<char*>(detail::contiguous_base(outputs));
    char* gathered = flat ? flat : static_cast<char*>(scratch(nbytes * size()));
    char* mine = gathered + nbytes * rank();
    if (size() == 1) {
      if (mine != input.data_ptr()) std::memcpy(mine, input.data_ptr(), nbytes);
    } else {
      dispatch_compute(input.dtype(), "ProcessGroupGloo", [&](auto t) {
        using T = typename decltype(t)::type;
        const size_t n = static_cast<size_t>(input.numel());
        gloo::AllgatherOptions opts(context_);
        // Without an input gloo gathers in place: this rank's slot already holds the input.
        if (mine != input.data_ptr()) opts.setInput<T>(static_cast<T*>(input.data_ptr()), n);
        opts.setOutput<T>(reinterpret_cast<T*>(gathered), n * size());
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        gloo::allgather(opts);
      });
    }
    if (!flat) {
      for (int r = 0; r < size(); ++r) std::memcpy(outputs[r].data_ptr(), gathered + nbytes * r, nbytes);
    }
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                                          ReduceOp op, bool async_op) {
  if (output.numel() == 0) return completed_work("reduce_scatter");
  return enqueue({"reduce_scatter", output.dtype(), output.numel(), reduce_op_name(op)},
                 [this, output, inputs, op](uint32_t tag) {
    const size_t nbytes = output.nbytes();
    if (size() == 1) {
      if (output.data_ptr() != inputs[0].data_ptr()) std::memcpy(output.data_ptr(), inputs[0].data_ptr(), nbytes);
      return;
    }
    if (transport_ == "shm") {
      std::vector<const void*> in(inputs.size());
      for (size_t r = 0; r < inputs.size(); ++r) in[r] = inputs[r].data_ptr();
      return shm_->reduce_scatter(in, output.data_ptr(), static_cast<size_t>(output.numel()), output.dtype(), op, size());
    }
    dispatch_compute(output.dtype(), "ProcessGroupGloo", [&](auto t) {
      using T = typename decltype(t)::type;
      const size_t n = static_cast<size_t>(output.numel());
      detail::ring_reduce_scatter<T>(context_, inputs, static_cast<T*>(output.data_ptr()), n, detail::reduce_fn<T>(op), tag,
                             options_.timeout, static_cast<T*>(scratch(3 * nbytes)));
      if (op == ReduceOp::AVG) detail::divide(static_cast<T*>(output.data_ptr()), n, size());
    });
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_barrier(bool async_op) {
  // Every rank sends every other an empty message and waits for theirs: one message latency.
  return enqueue({"barrier"}, [this](uint32_t tag) {
    if (transport_ == "shm") return shm_->barrier();
    if (transport_ == "shm+tcp") return two_level_barrier(tag);
    mesh_->exchange(nullptr, nullptr, 0, tag);
  }, async_op);
}

}  // namespace lockstep::dist
