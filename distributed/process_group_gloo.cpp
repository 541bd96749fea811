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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "distributed/direct_mesh.h"
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

// All-reduce by direct exchange (DirectMesh): every rank sends its n elements to every other rank,
// then folds all W tensors in rank order, x0 op x1 op ... op x(W-1), the same order on every rank, so
// that every rank ends with the same bits. `tmp` holds the W - 1 received tensors.
template <typename T>
void exchange_all_reduce(DirectMesh& mesh, T* data, size_t n, gloo::AllreduceOptions::Func reduce, uint32_t tag,
                         T* tmp) {
  const int W = mesh.size(), rank = mesh.rank();
  mesh.exchange(data, tmp, n * sizeof(T), tag);
  auto from = [&](int r) -> const T* { return r == rank ? data : tmp + mesh.slot(r) * n; };
  // Rank 0 folds into its own tensor; the others into rank 0's received copy, the last step into
  // `data` (the reduce functions allow the output to be either input).
  T* acc = rank == 0 ? data : tmp;
  for (int r = 1; r < W; ++r) reduce(r == W - 1 ? data : acc, acc, from(r), n);
}

// Ring all-reduce over DirectMesh (gloo's ring, driven by the calling thread): W - 1 reduce-scatter
// steps, each sending one of W chunks to the right neighbour and adding the chunk that arrives from
// the left, then W - 1 all-gather steps passing the finished chunks on. Each chunk is reduced once,
// along the ring, and copied to the others, so every rank ends with the same bits. `tmp` holds one
// chunk (n / W rounded up).
template <typename T>
void ring_all_reduce(DirectMesh& mesh, T* data, size_t n, gloo::AllreduceOptions::Func reduce, uint32_t tag,
                     T* tmp) {
  const int W = mesh.size(), rank = mesh.rank();
  const int right = (rank + 1) % W, left = (rank + W - 1) % W;
  auto begin = [&](int c) { return static_cast<size_t>(c) * n / static_cast<size_t>(W); };
  auto length = [&](int c) { return begin(c + 1) - begin(c); };
  auto step = [&](int send_chunk, int recv_chunk, T* recv_to) {
    const void* send = data + begin(send_chunk);
    const size_t send_bytes = length(send_chunk) * sizeof(T), recv_bytes = length(recv_chunk) * sizeof(T);
    // On the stack: a span, not a vector, per step.
    const DirectMesh::Message both[] = {{right, send, send_bytes, recv_to, recv_bytes}};
    const DirectMesh::Message apart[] = {{right, send, send_bytes, nullptr, 0, true, false},
                                         {left, nullptr, 0, recv_to, recv_bytes, false, true}};
    if (left == right) {
      mesh.transfer(both, tag);
    } else {
      mesh.transfer(apart, tag);
    }
  };
  for (int s = 0; s < W - 1; ++s) {
    const int send_chunk = (rank - s + W) % W, recv_chunk = (rank - s - 1 + 2 * W) % W;
    step(send_chunk, recv_chunk, tmp);
    reduce(data + begin(recv_chunk), data + begin(recv_chunk), tmp, length(recv_chunk));
  }
  // This rank now holds the whole reduction of chunk rank + 1.
  for (int s = 0; s < W - 1; ++s) {
    const int send_chunk = (rank + 1 - s + W) % W, recv_chunk = (rank - s + W) % W;
    step(send_chunk, recv_chunk, data + begin(recv_chunk));
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

namespace {

// A socket as the kernel's TCP table shows it.
struct KernelTcpSocket {
  int state = 0;  // TCP_ESTABLISHED, TCP_CLOSE_WAIT, ... (netinet/tcp.h)
  std::string local, peer;
};

// "0100007F:B38F" (/proc/net/tcp: the address's bytes as the kernel stores them, printed as 32-bit
// words; the port in host order) to "127.0.0.1:45967"; "" when malformed.
std::string proc_net_address(const std::string& field, bool v6) {
  const size_t colon = field.find(':');
  const size_t hex_digits = v6 ? 32 : 8;
  if (colon != hex_digits || field.size() < colon + 2) return "";
  uint32_t words[4] = {};
  for (size_t w = 0; w < hex_digits / 8; ++w) {
    words[w] = static_cast<uint32_t>(std::stoul(field.substr(w * 8, 8), nullptr, 16));
  }
  const auto port = static_cast<uint16_t>(std::stoul(field.substr(colon + 1), nullptr, 16));
  sockaddr_storage ss{};
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_addr, words, sizeof(a->sin6_addr));
    a->sin6_port = htons(port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_addr, words, sizeof(a->sin_addr));
    a->sin_port = htons(port);
  }
  return format_address(ss);
}

// This network namespace's TCP sockets that belong to a process, by inode (/proc/net/tcp and tcp6);
// nullopt when the table cannot be read. Reading it touches no file descriptor, so it cannot race
// with gloo's threads closing theirs (nor inspect a descriptor number that was closed and reused).
std::optional<std::unordered_map<uint64_t, KernelTcpSocket>> kernel_tcp_table() {
  std::unordered_map<uint64_t, KernelTcpSocket> table;
  bool read_any = false;
  for (bool v6 : {false, true}) {
    std::ifstream in(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    if (!in) continue;
    read_any = true;
    std::string line;
    std::getline(in, line);  // the column titles
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
      std::istringstream fields(line);
      std::string slot, local, peer, state, queues, timer, retransmits, uid, timeout;
      uint64_t inode = 0;
      if (!(fields >> slot >> local >> peer >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)) {
        continue;
      }
      if (inode == 0) continue;  // orphaned: closed by its process, still winding down
      try {
        KernelTcpSocket s{static_cast<int>(std::stoul(state, nullptr, 16)), proc_net_address(local, v6),
                          proc_net_address(peer, v6)};
        if (!s.local.empty() && !s.peer.empty()) table[inode] = std::move(s);
      } catch (const std::exception&) {
        // a line in a format this code does not know: skipped
      }
    }
  }
  if (!read_any) return std::nullopt;
  return table;
}

}  // namespace

// This process's connected TCP sockets: the socket inodes its descriptors name (readlink of
// /proc/self/fd/N, "socket:[INODE]", which does not touch the descriptor itself), looked up in the
// kernel's TCP table.
std::vector<ProcessGroupGloo::TcpSocket> ProcessGroupGloo::tcp_sockets() {
  std::vector<TcpSocket> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return out;
  std::vector<uint64_t> inodes;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char target[64] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    unsigned long long inode = 0;
    if (n > 0 && std::sscanf(target, "socket:[%llu]", &inode) == 1) inodes.push_back(inode);
  }
  ::closedir(dir);
  const auto table = kernel_tcp_table();
  if (!table) return out;
  for (uint64_t inode : inodes) {
    auto it = table->find(inode);
    if (it == table->end() || it->second.state == TCP_LISTEN) continue;  // not TCP, or not connected
    out.push_back({inode, it->second.local, it->second.peer});
  }
  return out;
}

void ProcessGroupGloo::identify_peer_sockets(Store& store, const std::vector<TcpSocket>& before) {
  // gloo's connections are the sockets that connecting created. Rank r's end of this rank's
  // connection to it has this end's addresses swapped: each rank publishes its new sockets and looks
  // for its own among the others' lists. A socket that matches no rank, or a rank matched twice,
  // stays unknown (inode 0): errors then quote gloo alone.
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
  // By inode in the kernel's table, never through gloo's descriptors: gloo's event loop closes a
  // pair's descriptor as soon as its connection fails, on its own thread. A socket gloo closed is
  // orphaned (inode 0 in the table) or gone, so it is lost too.
  std::vector<int> lost;
  const auto table = kernel_tcp_table();
  if (!table) return lost;  // cannot tell: the error quotes gloo alone
  for (int r = 0; r < size(); ++r) {
    const TcpSocket& s = peer_sockets_[r];
    if (s.inode == 0) continue;
    auto it = table->find(s.inode);
    if (it == table->end() || it->second.state != TCP_ESTABLISHED) lost.push_back(r);
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
    const std::string mesh_host = attr.hostname.empty() ? interface_address(attr.iface) : attr.hostname;
    LOCKSTEP_CHECK(!mesh_host.empty(), "interface ", attr.iface, " has no IPv4 or global IPv6 address");
    mesh_ = std::make_unique<DirectMesh>(*prefixed, rank, size, mesh_host, options_.timeout);
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
      const std::string why = dynamic_cast<const PeerError*>(&e) ? std::string(e.what()) : explain(e.what());
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
      const auto reduce = allreduce_fn<T>(op);
      const Options::Algorithm algorithm = allreduce_algorithm(n, sizeof(T));
      if (algorithm == Options::Algorithm::kExchange) {
        exchange_all_reduce<T>(*mesh_, data, n, reduce, tag, static_cast<T*>(scratch(n * sizeof(T) * (size() - 1))));
      } else if (algorithm == Options::Algorithm::kRing) {
        ring_all_reduce<T>(*mesh_, data, n, reduce, tag, static_cast<T*>(scratch((n / size() + 1) * sizeof(T))));
      } else {
        gloo::AllreduceOptions opts(context_);
        opts.setOutput<T>(data, n);
        opts.setReduceFunction(reduce);
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        if (algorithm == Options::Algorithm::kGlooBcube) opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
        gloo::allreduce(opts);
      }
      if (op == ReduceOp::AVG) divide(data, n, size());
    });
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_broadcast(Tensor& tensor, int root, bool async_op) {
  if (tensor.numel() == 0 || size() == 1) return completed_work("broadcast");
  return enqueue({"broadcast", tensor.dtype(), tensor.numel(), nullptr, root}, [this, tensor, root](uint32_t tag) {
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
    dispatch_compute(output.dtype(), "ProcessGroupGloo", [&](auto t) {
      using T = typename decltype(t)::type;
      const size_t n = static_cast<size_t>(output.numel());
      ring_reduce_scatter<T>(context_, inputs, static_cast<T*>(output.data_ptr()), n, allreduce_fn<T>(op), tag,
                             options_.timeout, static_cast<T*>(scratch(3 * nbytes)));
      if (op == ReduceOp::AVG) divide(static_cast<T*>(output.data_ptr()), n, size());
    });
  }, async_op);
}

std::shared_ptr<Work> ProcessGroupGloo::do_barrier(bool async_op) {
  // Every rank sends every other an empty message and waits for theirs: one message latency.
  return enqueue({"barrier"}, [this](uint32_t tag) { mesh_->exchange(nullptr, nullptr, 0, tag); }, async_op);
}

}  // namespace lockstep::dist
