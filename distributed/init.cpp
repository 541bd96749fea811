// init_process_group & co: parsing the init method, the store, the rendezvous checks, the default group.
#include "distributed/init.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "data/world.h"
#include "distributed/file_store.h"
#include "distributed/prefix_store.h"
#include "distributed/process_group_gloo.h"
#include "distributed/socket.h"
#include "distributed/tcp_store.h"
#include "common/check.h"

#ifdef LOCKSTEP_WITH_NCCL
#include "distributed/process_group_nccl.h"
#include "tensor/cuda/cuda.h"
#endif

namespace lockstep::dist {

namespace {

using std::chrono::milliseconds;

constexpr milliseconds kNcclDefaultTimeout{10 * 60 * 1000};
// How long the rank hosting the TCPStore keeps it up after a failed rendezvous, so the other ranks can
// read why before it goes away.
constexpr milliseconds kAbortLinger{2000};

struct DefaultGroup {
  std::shared_ptr<Store> store;
  std::shared_ptr<ProcessGroup> pg;
  std::string backend;
};

std::mutex g_mu;
std::unique_ptr<DefaultGroup> g_group;  // guarded by g_mu
uint64_t g_generation = 0;              // init_process_group calls so far, guarded by g_mu

// Where and how the ranks meet, parsed from InitOptions.
struct Rendezvous {
  enum Kind { Tcp, File } kind = Tcp;
  std::string host;
  uint16_t port = 0;
  std::string path;
  int world_size = -1;
  int rank = -1;
};

int parse_int(const std::string& s, const std::string& what) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  LOCKSTEP_CHECK(ec == std::errc() && ptr == s.data() + s.size() && !s.empty(), "init_process_group: ", what, "=\"", s,
                 "\" is not an integer");
  return value;
}

uint16_t parse_port(const std::string& s, const std::string& what) {
  int port = parse_int(s, what);
  LOCKSTEP_CHECK(port > 0 && port < 65536, "init_process_group: ", what, "=", port, " is not a port (1..65535)");
  return static_cast<uint16_t>(port);
}

std::string require_env(const char* name) {
  const char* v = std::getenv(name);
  LOCKSTEP_CHECK(v && *v, "init_process_group: environment variable ", name,
                 " is not set (env:// needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK; the launcher sets them)");
  return v;
}

Rendezvous parse_init_method(const InitOptions& o) {
  Rendezvous rv;
  rv.world_size = o.world_size;
  rv.rank = o.rank;
  const std::string& m = o.init_method;
  if (m == "env://") {
    rv.host = require_env("MASTER_ADDR");
    rv.port = parse_port(require_env("MASTER_PORT"), "MASTER_PORT");
    if (rv.world_size < 0) rv.world_size = parse_int(require_env("WORLD_SIZE"), "WORLD_SIZE");
    if (rv.rank < 0) rv.rank = parse_int(require_env("RANK"), "RANK");
  } else if (m.starts_with("tcp://")) {
    std::string hostport = m.substr(6);
    if (!hostport.empty() && hostport.back() == '/') hostport.pop_back();
    try {
      std::tie(rv.host, rv.port) = split_host_port(hostport, "init_method");  // [IPV6]:PORT unbracketed
    } catch (const Error&) {
      fail("init_process_group: init_method \"", m, "\" is not tcp://HOST:PORT with a port in 1..65535");
    }
  } else if (m.starts_with("file://")) {
    rv.kind = Rendezvous::File;
    rv.path = m.substr(7);
    LOCKSTEP_CHECK(rv.path.starts_with("/"), "init_process_group: init_method \"", m,
                   "\" is not file:///ABSOLUTE/PATH");
  } else {
    fail("init_process_group: unknown init_method \"", m, "\" (expected env://, tcp://HOST:PORT or file:///PATH)");
  }
  if (m != "env://") {
    LOCKSTEP_CHECK(rv.world_size >= 0 && rv.rank >= 0, "init_process_group: ", m.substr(0, m.find(':')),
                   ":// needs world_size and rank in InitOptions (got world_size=", rv.world_size, ", rank=", rv.rank,
                   ")");
  }
  LOCKSTEP_CHECK(rv.world_size > 0, "init_process_group: world_size must be positive, got ", rv.world_size);
  LOCKSTEP_CHECK(rv.rank >= 0, "init_process_group: rank ", rv.rank, " is out of range for world_size ",
                 rv.world_size, " (ranks are 0..", rv.world_size - 1, ")");
  return rv;  // rank < world_size is checked by init_process_group, which tells the other ranks
}

std::string resolve_backend(const std::string& backend) {
#ifdef LOCKSTEP_WITH_NCCL
  if (backend == "nccl") {
    LOCKSTEP_CHECK(cuda::device_count() > 0, "init_process_group: backend \"nccl\" needs a CUDA device and none is "
                   "visible (", cuda::unavailable_reason(), "); use \"gloo\" or \"auto\"");
    return backend;
  }
  if (backend == "auto") return cuda::device_count() > 0 ? "nccl" : "gloo";
#else
  LOCKSTEP_CHECK(backend != "nccl", "init_process_group: backend \"nccl\": lockstep was built without NCCL (build "
                 "where the CUDA toolkit and NCCL are found, without --config=nocuda), use \"gloo\"");
  if (backend == "auto") return "gloo";
#endif
  LOCKSTEP_CHECK(backend == "gloo", "init_process_group: unknown backend \"", backend, "\" (expected gloo, nccl or auto)");
  return backend;
}

milliseconds resolve_timeout(const InitOptions& o, const std::string& backend) {
  if (o.timeout) {
    LOCKSTEP_CHECK(o.timeout->count() > 0, "init_process_group: timeout must be positive, got ", o.timeout->count(),
                   " ms");
    return *o.timeout;
  }
  if (const char* s = std::getenv("LOCKSTEP_TIMEOUT"); s && *s) {
    char* end = nullptr;
    errno = 0;
    double seconds = std::strtod(s, &end);
    LOCKSTEP_CHECK(errno == 0 && end && *end == '\0' && seconds > 0, "init_process_group: LOCKSTEP_TIMEOUT=\"", s,
                   "\" is not a positive number of seconds");
    return milliseconds(static_cast<int64_t>(seconds * 1000 + 0.5));
  }
  return backend == "nccl" ? kNcclDefaultTimeout : ProcessGroupGloo::kDefaultTimeout;
}

// The launcher (launch.cpp), when it chose MASTER_PORT itself, passes rank 0 a pipe in this variable.
// Rank 0 writes "address-in-use HOST:PORT" to it when the port is taken, and the launcher restarts the
// ranks on another port.
constexpr const char* kLaunchStatusFdVar = "LOCKSTEP_LAUNCH_STATUS_FD";

// True when the launcher was told (so it will retry on another port).
bool tell_launcher_address_in_use(const std::string& addr) {
  const char* v = std::getenv(kLaunchStatusFdVar);
  if (!v || !*v) return false;
  int fd = -1;
  auto [ptr, ec] = std::from_chars(v, v + std::strlen(v), fd);
  if (ec != std::errc() || *ptr != '\0' || fd < 0 || ::fcntl(fd, F_GETFD) == -1) return false;
  const std::string line = "address-in-use " + addr + "\n";
  return ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

// How long a rank that is about to fail waits for the store to tell the others why.
constexpr milliseconds kNotifyTimeout{5000};

// When rank 0 finds its port taken: is it this job's store, hosted by another process that also
// claims rank 0? Then joining it (as a client) lets the rendezvous report the duplicate to every rank.
std::shared_ptr<Store> existing_rendezvous(const Rendezvous& rv, const std::string& prefix, milliseconds timeout) {
  const milliseconds probe = std::min(timeout, milliseconds(1000));
  try {
    auto store = std::make_shared<TCPStore>(rv.host, rv.port, /*is_master=*/false, probe);
    PrefixStore generation(prefix, store);
    const Deadline until = deadline_after(probe);
    do {
      if (generation.check({"master"})) {
        store->set_timeout(timeout);
        return store;
      }
      std::this_thread::sleep_for(milliseconds(20));
    } while (Clock::now() < until);
  } catch (const Error&) {
    // Not a TCPStore, or not answering: the port is simply in use.
  }
  return nullptr;
}

struct OpenedStore {
  std::shared_ptr<Store> store;
  bool hosting = false;  // this process serves it (TCP rank 0)
};

OpenedStore make_store(const Rendezvous& rv, const std::string& prefix, milliseconds timeout) {
  if (rv.kind == Rendezvous::File) {
    try {
      return {std::make_shared<FileStore>(rv.path, rv.world_size, timeout)};
    } catch (const Error& e) {
      fail("init_process_group: rank ", rv.rank, " could not open the file store: ", e.what());
    }
  }
  const std::string addr = format_address(rv.host, rv.port);
  try {
    return {std::make_shared<TCPStore>(rv.host, rv.port, /*is_master=*/rv.rank == 0, timeout), rv.rank == 0};
  } catch (const AddressInUseError& e) {
    if (!tell_launcher_address_in_use(addr)) {
      if (auto store = existing_rendezvous(rv, prefix, timeout)) return {store};
    }
    fail("init_process_group: rank 0 could not host the store on ", addr, " (is another job using the port?): ",
         e.what());
  } catch (const Error& e) {
    if (rv.rank == 0) fail("init_process_group: rank 0 could not host the store on ", addr, ": ", e.what());
    fail("init_process_group: rank ", rv.rank, " could not reach the store at ", addr, " (rank 0 hosts it) within ",
         detail::format_seconds(timeout), ": ", e.what());
  }
}

// A rank outside [0, world_size) fails; before that it tries, briefly, to tell the other ranks (who
// would otherwise wait for the rank that is missing) through the store's "abort" key.
[[noreturn]] void fail_rank_out_of_range(const Rendezvous& rv, const std::string& prefix, milliseconds timeout) {
  const std::string why = lockstep::detail::str_cat("a process was started with rank ", rv.rank,
                                                    ", out of range for world_size ", rv.world_size, " (ranks are 0..",
                                                    rv.world_size - 1, ")");
  if (rv.kind == Rendezvous::Tcp) {
    try {
      auto store = std::make_shared<TCPStore>(rv.host, rv.port, /*is_master=*/false, std::min(timeout, kNotifyTimeout));
      PrefixStore rendezvous(prefix, store);
      rendezvous.add("aborters", 1);  // counted by the host's linger, as a rank that has seen the abort
      rendezvous.set("abort", why);
    } catch (const Error&) {
      // Nobody to tell yet: the others will name the rank that is missing when their timeout passes.
    }
  }
  fail("init_process_group: rank ", rv.rank, " is out of range for world_size ", rv.world_size, " (ranks are 0..",
       rv.world_size - 1, ")");
}

// Identifies this process in duplicate-rank errors.
std::string process_token() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return lockstep::detail::str_cat(host, ":pid ", ::getpid(), " #", rd() % 100000);
}

// The rendezvous checks, on `store` (this generation's prefix). Every rank registers as "rank/<r>"
// and writes its world size; a disagreement is published under "abort" so that every waiting rank
// fails with the same message. `hosting`: this rank serves the store (TCP rank 0), and keeps it up a
// little after a failure so the others can read the reason.
class RendezvousCheck {
 public:
  RendezvousCheck(Store& store, const Rendezvous& rv, bool hosting, Deadline deadline, milliseconds timeout)
      : store_(store), rv_(rv), hosting_(hosting), deadline_(deadline), timeout_(timeout) {}

  void run() {
    store_.add("joined", 1);
    const std::string ws = std::to_string(rv_.world_size);
    std::string seen = store_.compare_set("world_size", "", ws);
    if (seen != ws) {
      abort(lockstep::detail::str_cat("rank ", rv_.rank, " has world_size ", rv_.world_size,
                                      " but a rank that joined before it has world_size ", seen,
                                      " (every rank must be started with the same WORLD_SIZE)"));
    }
    const std::string token = process_token();
    const std::string key = "rank/" + std::to_string(rv_.rank);
    std::string owner = store_.compare_set(key, "", token);
    if (owner != token) {
      abort(lockstep::detail::str_cat("rank ", rv_.rank, " was claimed twice, by ", owner, " and by ", token,
                                      " (give every process its own RANK and every job its own MASTER_PORT; with "
                                      "file://, remove a file left over from an earlier job)"));
    }
    wait_for_all();
  }

 private:
  void wait_for_all() {
    std::vector<std::string> keys;
    for (int r = 0; r < rv_.world_size; ++r) keys.push_back("rank/" + std::to_string(r));
    auto pause = milliseconds(1);
    for (;;) {
      if (store_.check({"abort"})) {
        std::string why = store_.get_string("abort");
        store_.add("abort_acks", 1);  // after reading: the host may close the store once all have acked
        linger();
        fail("init_process_group: rank ", rv_.rank, ": the rendezvous failed: ", why);
      }
      if (store_.check(keys)) return;
      if (Clock::now() >= deadline_) {
        std::vector<int> missing;
        for (int r = 0; r < rv_.world_size; ++r) {
          if (!store_.check({keys[r]})) missing.push_back(r);
        }
        if (missing.empty()) return;
        std::string names;
        for (int r : missing) names += (names.empty() ? "" : ", ") + std::to_string(r);
        abort(lockstep::detail::str_cat(missing.size() == 1 ? "rank " : "ranks ", names, " of world size ",
                                        rv_.world_size, " did not join within ", detail::format_seconds(timeout_)),
              /*timed_out=*/true);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, milliseconds(50));
    }
  }

  [[noreturn]] void abort(const std::string& why, bool timed_out = false) {
    try {
      store_.add("aborters", 1);
      store_.set("abort", why);
      linger();
    } catch (const std::exception&) {
      // Best effort: this rank's own error below is what matters.
    }
    if (timed_out) throw TimeoutError("init_process_group: " + why);
    fail("init_process_group: ", why);
  }

  // The host keeps the store up until every rank (the world_size expected, or all that joined if more
  // did) has seen the abort, or kAbortLinger: a rank still connecting then learns why, instead of
  // finding the store gone.
  void linger() {
    if (!hosting_) return;
    Deadline until = Clock::now() + std::min(kAbortLinger, timeout_);
    while (Clock::now() < until) {
      int64_t expected = std::max<int64_t>(rv_.world_size, store_.add("joined", 0));
      if (store_.add("abort_acks", 0) + store_.add("aborters", 0) >= expected) return;
      std::this_thread::sleep_for(milliseconds(5));
    }
  }

  Store& store_;
  const Rendezvous& rv_;
  bool hosting_;
  Deadline deadline_;
  milliseconds timeout_;
};

// A rank reaching a TCPStore port first makes sure the server there was started by this generation's
// rank 0: after destroy_process_group a fast rank may reconnect to the port before rank 0 has closed
// the previous store. Connection errors are retried (the store reconnects) until the deadline.
void await_master(Store& store, const Rendezvous& rv, Deadline deadline, milliseconds timeout) {
  auto pause = milliseconds(1);
  std::string last_error;
  for (;;) {
    try {
      if (store.check({"master"})) return;
    } catch (const Error& e) {
      last_error = e.what();
    }
    if (Clock::now() >= deadline) {
      fail("init_process_group: rank ", rv.rank, ": the store at ", format_address(rv.host, rv.port),
           " was not started by this job's rank 0 within ", detail::format_seconds(timeout),
           last_error.empty() ? "" : " (last error: " + last_error + ")");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(50));
  }
}

std::shared_ptr<ProcessGroup> checked_pg(const char* caller) {
  std::lock_guard lock(g_mu);
  LOCKSTEP_CHECK(g_group != nullptr, caller,
                 ": the default process group is not initialized; call dist::init_process_group() first");
  return g_group->pg;
}

}  // namespace

void init_process_group(const InitOptions& options) {
  std::lock_guard lock(g_mu);
  LOCKSTEP_CHECK(g_group == nullptr, "init_process_group: the default process group is already initialized (",
                 g_group ? g_group->backend : "", ", rank ", g_group ? g_group->pg->rank() : -1,
                 "); call destroy_process_group() first");
  const std::string backend = resolve_backend(options.backend);
  const Rendezvous rv = parse_init_method(options);
  const milliseconds timeout = resolve_timeout(options, backend);
  const Deadline deadline = deadline_after(timeout);
  const uint64_t generation = ++g_generation;
  // Every init gets its own key space: a FileStore outlives a generation when ranks overlap.
  const std::string prefix = "lockstep/" + std::to_string(generation);
  if (rv.rank >= rv.world_size) fail_rank_out_of_range(rv, prefix, timeout);

  auto group = std::make_unique<DefaultGroup>();
  group->backend = backend;
  auto [base_store, hosting] = make_store(rv, prefix, timeout);
  group->store = base_store;
  auto store = std::make_shared<PrefixStore>(prefix, group->store);
  if (rv.kind == Rendezvous::Tcp) {
    if (hosting) {
      store->set("master", "");
    } else {
      await_master(*store, rv, deadline, timeout);
    }
  }
  RendezvousCheck(*store, rv, hosting, deadline, timeout).run();

  if (backend == "gloo") {
    ProcessGroupGloo::Options gloo;
    gloo.timeout = timeout;
    if (rv.kind == Rendezvous::Tcp) gloo.master_addr = rv.host;
    group->pg = std::make_shared<ProcessGroupGloo>(store, rv.rank, rv.world_size, gloo);
  } else {
#ifdef LOCKSTEP_WITH_NCCL
    ProcessGroupNCCL::Options nccl;
    nccl.timeout = timeout;
    const char* local = std::getenv("LOCAL_RANK");
    int local_rank = local && *local ? parse_int(local, "LOCAL_RANK") : rv.rank;
    nccl.device = local_rank % std::max(1, cuda::device_count());
    group->pg = std::make_shared<ProcessGroupNCCL>(store, rv.rank, rv.world_size, nccl);
#endif
  }
  // Every rank is connected once this returns; after it no rank needs the store's rendezvous keys, so
  // rank 0 may tear the store down right away.
  try {
    group->pg->barrier()->wait();
  } catch (const Error& e) {
    fail("init_process_group: rank ", rv.rank, ": the first barrier failed: ", e.what());
  }

  const int world_size = rv.world_size, rank = rv.rank;
  data::default_world_provider() = [world_size, rank] { return std::make_pair(world_size, rank); };
  g_group = std::move(group);
}

void destroy_process_group() {
  std::unique_ptr<DefaultGroup> group;
  {
    std::lock_guard lock(g_mu);
    group = std::move(g_group);
    if (group) data::default_world_provider() = nullptr;
  }
  if (!group) return;
  group->pg.reset();     // waits for queued collectives, closes connections and threads
  group->store.reset();  // rank 0 closes the TCPStore server
}

bool is_initialized() {
  std::lock_guard lock(g_mu);
  return g_group != nullptr;
}

std::shared_ptr<ProcessGroup> default_pg() { return checked_pg("default_pg"); }

int get_rank() { return checked_pg("get_rank")->rank(); }

int get_world_size() { return checked_pg("get_world_size")->size(); }

int get_local_rank() {
  const char* local = std::getenv("LOCAL_RANK");
  if (local && *local) return parse_int(local, "LOCAL_RANK");
  return checked_pg("get_local_rank")->rank();
}

std::string get_backend() {
  std::lock_guard lock(g_mu);
  LOCKSTEP_CHECK(g_group != nullptr,
                 "get_backend: the default process group is not initialized; call dist::init_process_group() first");
  return g_group->backend;
}

void all_reduce(Tensor& tensor, ReduceOp op) { checked_pg("all_reduce")->all_reduce(tensor, op, /*async_op=*/false); }

void broadcast(Tensor& tensor, int root) { checked_pg("broadcast")->broadcast(tensor, root, /*async_op=*/false); }

void all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  checked_pg("all_gather")->all_gather(outputs, input, /*async_op=*/false);
}

void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  checked_pg("reduce_scatter")->reduce_scatter(output, inputs, op, /*async_op=*/false);
}

void barrier() { checked_pg("barrier")->barrier(/*async_op=*/false); }

}  // namespace lockstep::dist
