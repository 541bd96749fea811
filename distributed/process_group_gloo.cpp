// ProcessGroupGloo: gloo's TCP full mesh, one worker thread, and the collectives on raw data pointers.
#include "distributed/process_group_gloo.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/types.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "distributed/gloo_store_adapter.h"
#include "distributed/prefix_store.h"
#include "distributed/socket.h"

namespace lockstep::dist {

namespace {

// Elementwise c = a (op) b, the shape of gloo's reduction callback; c may be a.
template <typename T>
void sum(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) x[i] = p[i] + q[i];
}
template <typename T>
void product(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) x[i] = p[i] * q[i];
}
template <typename T>
void min(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) x[i] = std::min(p[i], q[i]);
}
template <typename T>
void max(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) x[i] = std::max(p[i], q[i]);
}

// AVG reduces with SUM, then divides.
template <typename T>
gloo::AllreduceOptions::Func allreduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return &sum<T>;
    case ReduceOp::PRODUCT: return &product<T>;
    case ReduceOp::MIN: return &min<T>;
    case ReduceOp::MAX: return &max<T>;
  }
  fail("ProcessGroupGloo: unknown reduce op ", int(op));
}

// gloo's own collectives use slot prefixes 0x01-0x08.
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;

template <typename T>
void divide(T* p, size_t n, int by) {
  const T d = static_cast<T>(by);
  for (size_t i = 0; i < n; ++i) p[i] /= d;
}

// Ring reduce-scatter over the caller's W inputs of n elements: chunk c starts at rank c + 1, which
// sends its inputs[c] to the right; every rank on the way adds its own inputs[c] and passes the sum on,
// until rank c adds the last one into `out`. W - 1 steps of n elements each way; the inputs are only
// read. `tmp` holds 3n elements: the chunk being received and two partial sums (one being sent while
// the next is computed).
template <typename T>
void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const std::vector<Tensor>& inputs, T* out,
                         size_t n, gloo::AllreduceOptions::Func reduce, uint32_t tag, std::chrono::milliseconds timeout,
                         T* tmp) {
  const int W = context->size, rank = context->rank;
  const size_t bytes = n * sizeof(T);
  const int right = (rank + 1) % W, left = (rank + W - 1) % W;
  const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  T* received = tmp;
  T* partial[2] = {tmp + n, tmp + 2 * n};
  auto recv_buffer = context->createUnboundBuffer(received, bytes);
  const T* sending = static_cast<const T*>(inputs[left].data_ptr());
  for (int step = 0; step < W - 1; ++step) {
    const int chunk = (rank + 2 * W - step - 2) % W;  // the chunk arriving from the left
    auto send_buffer = context->createUnboundBuffer(const_cast<T*>(sending), bytes);
    recv_buffer->recv(left, slot, 0, bytes);
    send_buffer->send(right, slot, 0, bytes);
    LOCKSTEP_CHECK(recv_buffer->waitRecv(timeout), "reduce_scatter: receive aborted");
    // The send is done before the sum is written: `out` may be any of the inputs.
    LOCKSTEP_CHECK(send_buffer->waitSend(timeout), "reduce_scatter: send aborted");
    T* sum = step == W - 2 ? out : partial[step % 2];
    reduce(sum, inputs[chunk].data_ptr(), received, n);
    sending = sum;
  }
}

// "127.0.0.1:45959", "[::1]:45959"; "" for other families.
std::string format_address(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf))) return "";
    return lockstep::detail::str_cat(buf, ":", ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf))) return "";
    return lockstep::detail::str_cat("[", buf, "]:", ntohs(a->sin6_port));
  }
  return "";
}

}  // namespace

// This process's connected TCP sockets.
std::vector<ProcessGroupGloo::TcpSocket> ProcessGroupGloo::tcp_sockets() {
  std::vector<TcpSocket> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return out;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    struct stat st {};
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;  // not a socket, or not a connected one
    }
    std::string l = format_address(local), p = format_address(peer);
    if (!l.empty() && !p.empty()) out.push_back({fd, static_cast<uint64_t>(st.st_ino), l, p});
  }
  ::closedir(dir);
  return out;
}

void ProcessGroupGloo::identify_peer_sockets(Store& store, const std::vector<TcpSocket>& before) {
  // gloo's connections are the sockets that connecting created. Rank r's end of this rank's
  // connection to it has this end's addresses swapped: each rank publishes its new sockets and looks
  // for its own among the others' lists. A socket that matches no rank, or a rank matched twice,
  // stays unknown (-1): errors then quote gloo alone.
  std::vector<TcpSocket> mine;
  for (const TcpSocket& s : tcp_sockets()) {
    bool old = std::any_of(before.begin(), before.end(), [&](const TcpSocket& b) { return b.inode == s.inode; });
    if (!old) mine.push_back(s);
  }
  std::string list;
  for (const TcpSocket& s : mine) list += s.local + " " + s.peer + "\n";
  store.set("sockets/" + std::to_string(rank()), list);
  peer_sockets_.assign(size(), TcpSocket{});
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    const std::string theirs = "\n" + store.get_string("sockets/" + std::to_string(r));
    int matches = 0;
    for (const TcpSocket& s : mine) {
      if (theirs.find("\n" + s.peer + " " + s.local + "\n") != std::string::npos) {
        ++matches;
        peer_sockets_[r] = s;
      }
    }
    if (matches != 1) peer_sockets_[r] = TcpSocket{};
  }
}

std::vector<int> ProcessGroupGloo::lost_peers() const {
  std::vector<int> lost;
  for (int r = 0; r < size(); ++r) {
    const TcpSocket& s = peer_sockets_[r];
    if (s.fd < 0) continue;
    struct stat st {};
    tcp_info info{};
    socklen_t len = sizeof(info);
    const bool closed = ::fstat(s.fd, &st) != 0 || !S_ISSOCK(st.st_mode) || static_cast<uint64_t>(st.st_ino) != s.inode;
    if (closed || ::getsockopt(s.fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 || info.tcpi_state != TCP_ESTABLISHED) {
      lost.push_back(r);
    }
  }
  return lost;
}

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
    const std::vector<TcpSocket> sockets_before = tcp_sockets();
    context->connectFullMesh(adapter, device_);
    context_ = std::move(context);
    identify_peer_sockets(*prefixed, sockets_before);
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

void ProcessGroupGloo::check_tensor(const Tensor& t, const char* op) const {
  LOCKSTEP_CHECK(t.device().is_cpu(), op, ": the gloo backend takes CPU tensors, got one on ", t.device(),
                 " (use the nccl backend for CUDA tensors, or move the tensor with .to(Device::cpu()))");
}

std::shared_ptr<Work> ProcessGroupGloo::enqueue(Describe what, std::function<void(uint32_t tag)> run) {
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(mu_);
    LOCKSTEP_CHECK(!stop_, "ProcessGroupGloo: ", what.op, " on a group being destroyed");
    work = std::make_shared<Work>(what.op, ++seq_);
    queue_.push_back(Task{work, what, std::move(run), next_tag_++});
  }
  cv_.notify_one();
  return work;
}

void ProcessGroupGloo::worker_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, with every queued collective done
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    if (!failure_.empty()) {
      error = std::make_exception_ptr(Error(lockstep::detail::str_cat(
          "ProcessGroupGloo: ", describe(task.what), " not run: an earlier collective failed on this group: ", failure_)));
    } else {
      try {
        task.run(task.tag);
      } catch (const std::exception& e) {
        const std::string why = explain(e.what());
        failure_ = lockstep::detail::str_cat(describe(task.what), ": ", why);
        error = std::make_exception_ptr(Error(lockstep::detail::str_cat(
            "ProcessGroupGloo: ", describe(task.what), " failed on rank ", rank(), " of ", size(), ": ", why)));
      }
    }
    task.run = nullptr;  // releases the tensors before waiters wake
    task.work->finish(error);
  }
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
  const std::vector<int> lost = lost_peers();
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

std::shared_ptr<Work> ProcessGroupGloo::do_all_reduce(Tensor& tensor, ReduceOp op) {
  if (tensor.numel() == 0) return completed_work("all_reduce");
  return enqueue({"all_reduce", tensor.dtype(), tensor.numel(), reduce_op_name(op)}, [this, tensor, op](uint32_t tag) {
    dispatch(tensor.dtype(), [&](auto t) {
      using T = typename decltype(t)::type;
      T* data = static_cast<T*>(tensor.data_ptr());
      size_t n = static_cast<size_t>(tensor.numel());
      if (size() > 1) {
        // In place on the tensor's memory (see GlooOptions for the algorithm).
        gloo::AllreduceOptions opts(context_);
        opts.setOutput<T>(data, n);
        opts.setReduceFunction(allreduce_fn<T>(op));
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        if (size() > 2 && n * sizeof(T) <= options_.allreduce_bcube_max_bytes) {
          opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
        }
        gloo::allreduce(opts);
      }
      if (op == ReduceOp::AVG && size() > 1) divide(data, n, size());
    });
  });
}

std::shared_ptr<Work> ProcessGroupGloo::do_broadcast(Tensor& tensor, int root) {
  if (tensor.numel() == 0 || size() == 1) return completed_work("broadcast");
  return enqueue({"broadcast", tensor.dtype(), tensor.numel(), nullptr, root}, [this, tensor, root](uint32_t tag) {
    dispatch(tensor.dtype(), [&](auto t) {
      using T = typename decltype(t)::type;
      gloo::BroadcastOptions opts(context_);
      opts.setOutput<T>(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(options_.timeout);
      gloo::broadcast(opts);
    });
  });
}

std::shared_ptr<Work> ProcessGroupGloo::do_all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  if (input.numel() == 0) return completed_work("all_gather");
  return enqueue({"all_gather", input.dtype(), input.numel()}, [this, outputs, input](uint32_t tag) {
    const size_t nbytes = input.nbytes();
    char* flat = static_cast<char*>(detail::contiguous_base(outputs));
    char* gathered = flat ? flat : static_cast<char*>(scratch(nbytes * size()));
    char* mine = gathered + nbytes * rank();
    if (size() == 1) {
      if (mine != input.data_ptr()) std::memcpy(mine, input.data_ptr(), nbytes);
    } else {
      dispatch(input.dtype(), [&](auto t) {
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
  });
}

std::shared_ptr<Work> ProcessGroupGloo::do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                                          ReduceOp op) {
  if (output.numel() == 0) return completed_work("reduce_scatter");
  return enqueue({"reduce_scatter", output.dtype(), output.numel(), reduce_op_name(op)},
                 [this, output, inputs, op](uint32_t tag) {
    const size_t nbytes = output.nbytes();
    if (size() == 1) {
      if (output.data_ptr() != inputs[0].data_ptr()) std::memcpy(output.data_ptr(), inputs[0].data_ptr(), nbytes);
      return;
    }
    dispatch(output.dtype(), [&](auto t) {
      using T = typename decltype(t)::type;
      const size_t n = static_cast<size_t>(output.numel());
      ring_reduce_scatter<T>(context_, inputs, static_cast<T*>(output.data_ptr()), n, allreduce_fn<T>(op), tag,
                             options_.timeout, static_cast<T*>(scratch(3 * nbytes)));
      if (op == ReduceOp::AVG) divide(static_cast<T*>(output.data_ptr()), n, size());
    });
  });
}

std::shared_ptr<Work> ProcessGroupGloo::do_barrier() {
  return enqueue({"barrier"}, [this](uint32_t tag) {
    if (size() == 1) return;
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

}  // namespace lockstep::dist
