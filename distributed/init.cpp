// init_process_group & co: parsing the init method, the backend and the timeout; the default group.
// Opening the store and the rendezvous checks are in rendezvous.cpp.
#include "distributed/init.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "data/world.h"
#include "distributed/debug.h"
#include "distributed/launch_env.h"
#include "distributed/rendezvous.h"
#include "distributed/store/file_store.h"
#include "distributed/store/prefix_store.h"
#include "distributed/gloo/process_group_gloo.h"
#include "distributed/net/socket.h"
#include "distributed/store/tcp_store.h"
#include "common/check.h"

#ifdef LOCKSTEP_WITH_MPI
#include "distributed/mpi/process_group_mpi.h"
#endif
#ifdef LOCKSTEP_WITH_NCCL
#include "distributed/nccl/process_group_nccl.h"
#include "tensor/cuda/cuda.h"
#endif

namespace lockstep::dist {

namespace {

using std::chrono::milliseconds;
using detail::Rendezvous;

constexpr milliseconds kNcclDefaultTimeout{10 * 60 * 1000};

struct DefaultGroup {
  std::shared_ptr<Store> store;
  std::shared_ptr<ProcessGroup> pg;
  std::string backend;
};

std::mutex g_mu;
std::unique_ptr<DefaultGroup> g_group;  // guarded by g_mu
uint64_t g_generation = 0;              // init_process_group calls so far, guarded by g_mu

// Makes `group` the default group (null: none), and tells data/ the world it is in: the one place that
// sets data::default_world_provider (DistributedSampler's rank and world size). Called with g_mu held.
void set_default_group(std::unique_ptr<DefaultGroup> group) {
  if (group) {
    const int world_size = group->pg->size(), rank = group->pg->rank();
    data::default_world_provider() = [world_size, rank] { return std::make_pair(world_size, rank); };
  } else {
    data::default_world_provider() = nullptr;
  }
  g_group = std::move(group);
}

// What env:// could not find, in the words of PyTorch's variables (launch_env.h lists the others).
[[noreturn]] void missing_env(const char* name) {
  fail("init_process_group: environment variable ", name,
       " is not set (env:// needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK; the launcher sets them). Under srun "
       "or mpirun, Slurm's or MPI's own variables stand in for them (distributed/launch_env.h).");
}

Rendezvous parse_init_method(const InitOptions& o) {
  Rendezvous rv;
  rv.world_size = o.world_size;
  rv.rank = o.rank;
  const std::string& m = o.init_method;
  if (m == "env://") {
    const LaunchEnv env = discover_launch_env();
    if (debug_level() != DebugLevel::Off) std::fprintf(stderr, "init_process_group: env:// %s\n", env.describe().c_str());
    if (env.master_addr.empty()) missing_env("MASTER_ADDR");
    if (env.master_port < 0) missing_env("MASTER_PORT");
    rv.host = env.master_addr;
    rv.port = static_cast<uint16_t>(env.master_port);
    if (rv.world_size < 0) rv.world_size = env.world_size >= 0 ? env.world_size : (missing_env("WORLD_SIZE"), 0);
    if (rv.rank < 0) rv.rank = env.rank >= 0 ? env.rank : (missing_env("RANK"), 0);
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
  // The job token, read once here: the store, the DirectMesh connections and the shared-memory segment
  // all check it (none set: nothing is checked, as in PyTorch).
  try {
    rv.token = JobToken::from_env();
  } catch (const Error& e) {
    fail("init_process_group: ", e.what());
  }
  if (debug_level() != DebugLevel::Off) {
    std::fprintf(stderr, "init_process_group: %s\n",
                 rv.token.enabled() ? ("job token from " + rv.token.source()).c_str()
                                    : "no job token (LOCKSTEP_JOB_TOKEN unset): peers are not checked");
  }
  LOCKSTEP_CHECK(rv.world_size > 0, "init_process_group: world_size must be positive, got ", rv.world_size);
  LOCKSTEP_CHECK(rv.rank >= 0, "init_process_group: rank ", rv.rank, " is out of range for world_size ",
                 rv.world_size, " (ranks are 0..", rv.world_size - 1, ")");
  return rv;  // rank < world_size is checked by init_process_group, which tells the other ranks
}

std::string resolve_backend(const std::string& backend) {
#ifndef LOCKSTEP_WITH_MPI
  LOCKSTEP_CHECK(backend != "mpi", "init_process_group: backend \"mpi\": lockstep was built without MPI (Open MPI's "
                 "mpi.h and libmpi were not found; tools/bazel installs libopenmpi-dev, then rebuild), use \"gloo\"");
#endif
  if (backend == "mpi") return backend;
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
  LOCKSTEP_CHECK(backend == "gloo", "init_process_group: unknown backend \"", backend,
                 "\" (expected gloo, nccl, mpi or auto)");
  return backend;
}

milliseconds resolve_timeout(const InitOptions& o, const std::string& backend) {
  if (o.timeout) {
    LOCKSTEP_CHECK(o.timeout->count() > 0, "init_process_group: timeout must be positive, got ", o.timeout->count(),
                   " ms");
    return *o.timeout;
  }
  if (const auto s = env_string("LOCKSTEP_TIMEOUT")) {
    char* end = nullptr;
    errno = 0;
    double seconds = std::strtod(s->c_str(), &end);
    LOCKSTEP_CHECK(errno == 0 && end && *end == '\0' && seconds > 0, "init_process_group: LOCKSTEP_TIMEOUT=\"", *s,
                   "\" is not a positive number of seconds");
    return milliseconds(static_cast<int64_t>(seconds * 1000 + 0.5));
  }
  return backend == "nccl" ? kNcclDefaultTimeout : ProcessGroupGloo::kDefaultTimeout;
}

// backend "mpi": rank and world size come from MPI_COMM_WORLD, under mpirun; no store, no rendezvous.
std::unique_ptr<DefaultGroup> init_mpi(const InitOptions& o, milliseconds timeout) {
  LOCKSTEP_CHECK(o.init_method == "env://", "init_process_group: backend \"mpi\" takes its ranks from MPI (mpirun) "
                 "and needs no init_method; got \"", o.init_method, "\" (leave it env://)");
#ifdef LOCKSTEP_WITH_MPI
  auto group = std::make_unique<DefaultGroup>();
  group->backend = "mpi";
  group->pg = std::make_shared<ProcessGroupMPI>(ProcessGroupMPI::Options{timeout});
  const int rank = group->pg->rank(), world_size = group->pg->size();
  LOCKSTEP_CHECK(o.world_size < 0 || o.world_size == world_size, "init_process_group: backend \"mpi\": world_size ",
                 o.world_size, " was given but MPI_COMM_WORLD has ", world_size, " process(es) (mpirun -np)");
  LOCKSTEP_CHECK(o.rank < 0 || o.rank == rank, "init_process_group: backend \"mpi\": rank ", o.rank,
                 " was given but this process is rank ", rank, " of MPI_COMM_WORLD");
  try {
    group->pg->barrier()->wait();
  } catch (const Error& e) {
    fail("init_process_group: rank ", rank, ": the first barrier failed: ", e.what());
  }
  return group;
#else
  (void)timeout;
  fail("init_process_group: backend \"mpi\": lockstep was built without MPI");
#endif
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
  if (backend == "mpi") {
    set_default_group(init_mpi(options, resolve_timeout(options, backend)));
    ++g_generation;
    return;
  }
  const Rendezvous rv = parse_init_method(options);
  const milliseconds timeout = resolve_timeout(options, backend);
  const Deadline deadline = deadline_after(timeout);
  const uint64_t generation = ++g_generation;
  // Every init gets its own key space: a FileStore outlives a generation when ranks overlap.
  const std::string prefix = "lockstep/" + std::to_string(generation);
  if (rv.rank >= rv.world_size) detail::fail_rank_out_of_range(rv, prefix, timeout);

  auto group = std::make_unique<DefaultGroup>();
  group->backend = backend;
  auto [base_store, hosting] = detail::make_store(rv, prefix, timeout);
  group->store = base_store;
  auto store = std::make_shared<PrefixStore>(prefix, group->store);
  if (rv.kind == Rendezvous::Tcp) {
    if (hosting) {
      store->set("master", "");
    } else {
      detail::await_master(*store, rv, deadline, timeout);
    }
  }
  detail::check_rendezvous(*store, rv, hosting, deadline, timeout);

  if (backend == "gloo") {
    ProcessGroupGloo::Options gloo;
    gloo.timeout = timeout;
    gloo.token = rv.token;
    if (rv.kind == Rendezvous::Tcp) gloo.master_addr = rv.host;
    group->pg = std::make_shared<ProcessGroupGloo>(store, rv.rank, rv.world_size, gloo);
  } else {
#ifdef LOCKSTEP_WITH_NCCL
    ProcessGroupNCCL::Options nccl;
    nccl.timeout = timeout;
    const int found = discover_launch_env().local_rank;
    const int local_rank = found >= 0 ? found : rv.rank;
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
  set_default_group(std::move(group));
}

void destroy_process_group() {
  std::unique_ptr<DefaultGroup> group;
  {
    std::lock_guard lock(g_mu);
    group = std::move(g_group);
    if (group) set_default_group(nullptr);
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
  if (const int found = discover_launch_env().local_rank; found >= 0) return found;
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

void all_gather_into_tensor(Tensor& output, const Tensor& input) {
  checked_pg("all_gather_into_tensor")->all_gather_into_tensor(output, input, /*async_op=*/false);
}

void reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op) {
  checked_pg("reduce_scatter_tensor")->reduce_scatter_tensor(output, input, op, /*async_op=*/false);
}

void barrier() { checked_pg("barrier")->barrier(/*async_op=*/false); }

}  // namespace lockstep::dist
