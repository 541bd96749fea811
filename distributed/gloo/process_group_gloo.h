// ProcessGroupGloo: collectives on CPU tensors over TCP with gloo (c10d's ProcessGroupGloo).
//
//   auto store = std::make_shared<TCPStore>("10.0.0.1", 29500, rank == 0);
//   ProcessGroupGloo pg(store, rank, world_size, std::chrono::seconds(60));
//   pg.all_reduce(grads)->wait();
//
// Construction is collective: every rank connects to every other (gloo's full mesh), exchanging
// addresses through the store under a prefix unique to this group instance, so groups can be created,
// destroyed and created again over one store as long as every rank creates them in the same order.
// One worker thread runs the collectives in the order they were issued, so each Work completes in
// order and the calls return at once; a blocking call (async_op false) issued while nothing is queued
// runs on the caller's thread instead, as gloo called directly would. A collective that fails (a peer died, the timeout passed) leaves
// the group unusable: later collectives fail at once, naming the first error. A peer whose connection
// breaks (its process died) is named, "all_reduce (float32, 1000 elements, SUM) failed on rank 0 of 2:
// lost connection to rank 1 (peer closed the connection; ...)": the group knows its socket to each
// rank (Linux: found through /proc/self/fd when connecting) and looks at which ones broke. Writes to a
// dead peer raise an error, not SIGPIPE: gloo's threads block that signal. Destruction waits for the
// queued collectives, then closes every connection and thread.
//
// Ranks that share a host (distributed/shm/host.h: found through the store, never assumed) run the
// collectives through shared memory (distributed/shm/shm_group.h) instead of loopback TCP:
//   - every rank on one host ("shm"): all five collectives;
//   - several hosts, some with more than one rank ("shm+tcp"): all_reduce, broadcast and barrier in
//     two levels, shared memory within each host and TCP (DirectMesh) between one leader per host, the
//     lowest rank of each host; all_gather and reduce_scatter over TCP;
//   - otherwise ("tcp"), or with GlooOptions::shared_memory false or LOCKSTEP_SHM=0 on any rank: TCP.
// transport() says which. Results are the same bits on every rank either way (a fixed order of
// reduction), though not always the same bits as another transport would give.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/gloo/peer_sockets.h"
#include "distributed/net/job_token.h"
#include "distributed/process_group.h"
#include "distributed/store/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace lockstep::dist {

class DirectMesh;
namespace shm {
class ShmGroup;
}

struct GlooOptions {
  // PyTorch's default collective timeout for gloo.
  static constexpr std::chrono::milliseconds kDefaultTimeout{30 * 60 * 1000};

  // Bounds every collective, and connecting to the peers.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // The address gloo listens on, in order: `hostname` when given; else the interface named by the
  // GLOO_SOCKET_IFNAME environment variable; else the local address through which `master_addr`
  // (MASTER_ADDR when empty) is reached; else 127.0.0.1.
  std::string hostname;
  std::string master_addr;
  // How all_reduce moves the data:
  //   kExchange: every rank sends its whole tensor to every other and folds all W in rank order. One
  //     message latency; (W - 1) tensors sent per rank.
  //   kRing: reduce-scatter then all-gather around the ring (gloo's ring algorithm): 2(W - 1) steps,
  //     2(W - 1)/W tensors sent per rank.
  //   Both run on DirectMesh (direct_mesh.h), driven by the calling thread.
  //   kGlooRing, kGlooBcube: gloo's own allreduce (PyTorch's path is kGlooRing), through gloo's
  //     event-loop transport.
  //   kAuto: kExchange while a rank sends at most `allreduce_exchange_max_bytes` in all, else kRing.
  //     Measured on loopback (2 cores, BENCHMARKS.md): the exchange wins up to 64 KiB at 2 and 4
  //     ranks, the ring from 1 MiB (1.9-2.1x at 2 ranks); both beat gloo's ring at every size.
  // The environment variable LOCKSTEP_GLOO_ALLREDUCE=auto|exchange|ring|gloo_ring|gloo_bcube
  // overrides kAuto, as NCCL_ALGO does NCCL's choice.
  enum class Algorithm { kAuto, kExchange, kRing, kGlooRing, kGlooBcube };
  Algorithm allreduce_algorithm = Algorithm::kAuto;
  size_t allreduce_exchange_max_bytes = size_t{256} << 10;
  // Shared memory between the ranks of a host (see ProcessGroupGloo). LOCKSTEP_SHM=0 in the environment
  // turns it off too; off on one rank is off on all of them.
  bool shared_memory = true;
  // Bytes each rank stages per step in the segment (ShmOptions::slot_bytes); LOCKSTEP_SHM_SLOT_BYTES.
  size_t shm_slot_bytes = size_t{1} << 20;
  // How long a rank waiting for another spins before it sleeps (ShmOptions::spin); LOCKSTEP_SHM_SPIN_US.
  std::chrono::microseconds shm_spin{50};
  // The job token (job_token.h): DirectMesh's connections and the shared-memory segment accept only
  // peers that prove it. None: nothing is checked. init_process_group passes LOCKSTEP_JOB_TOKEN's.
  JobToken token{};
};

class ProcessGroupGloo : public ProcessGroup {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = GlooOptions::kDefaultTimeout;
  using Options = GlooOptions;

  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout);
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, Options options = {});
  ~ProcessGroupGloo() override;

  std::string backend_name() const override { return "gloo"; }
  std::string transport() const override { return transport_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // The local address gloo listens on (its device), for messages and tests.
  const std::string& address() const { return address_; }

 protected:
  void check_tensor(const Tensor& t, const char* op) const override;
  std::shared_ptr<Work> do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) override;
  std::shared_ptr<Work> do_broadcast(Tensor& tensor, int root, bool async_op) override;
  std::shared_ptr<Work> do_all_gather(std::vector<Tensor>& outputs, const Tensor& input, bool async_op) override;
  std::shared_ptr<Work> do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                          bool async_op) override;
  std::shared_ptr<Work> do_barrier(bool async_op) override;

 private:
  // What a queued collective is, for its error message.
  struct Describe {
    const char* op;
    Dtype dtype = Dtype::Float32;
    int64_t numel = -1;  // -1: no tensor (barrier)
    const char* detail = nullptr;  // the reduce op's name
    int root = -1;
  };
  struct Task {
    std::shared_ptr<Work> work;
    Describe what;
    std::function<void(uint32_t tag)> run;
    uint32_t tag = 0;
  };

  // Queues `run` for the worker, or runs it on this thread when `async_op` is false and the group is
  // idle; returns its Work.
  std::shared_ptr<Work> enqueue(Describe what, std::function<void(uint32_t tag)> run, bool async_op);
  void worker_loop();
  // Runs a task and finishes its Work; on whichever thread owns the group's collectives at the time.
  void execute(Task& task);
  std::string describe(const Describe& d) const;
  // gloo's error text, with the ranks whose connections broke named and a timeout spelled out.
  std::string explain(const std::string& gloo_error) const;

  // Finds the ranks that share this rank's host and sets up the shared-memory group and the leaders'
  // mesh (collective); sets transport_.
  void setup_shared_memory(Store& store, const std::string& mesh_host);
  // In two levels: shared memory within the host, TCP between the hosts' leaders.
  template <typename T>
  void two_level_all_reduce(T* data, size_t n, ReduceOp op, uint32_t tag);
  void two_level_broadcast(void* data, size_t bytes, int root, uint32_t tag);
  void two_level_barrier(uint32_t tag);
  // all_reduce's algorithm for n elements of element_bytes each (GlooOptions).
  Options::Algorithm allreduce_algorithm(size_t n, size_t element_bytes) const;
  // A buffer of at least `nbytes` for the executing collective, reused across collectives.
  void* scratch(size_t nbytes);

  Options options_;
  std::string address_;
  PeerSockets peer_sockets_;  // names the ranks whose connection broke
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<DirectMesh> mesh_;  // small all-reduces and barriers (direct_mesh.h)
  std::string transport_ = "tcp";
  std::vector<int> host_of_;               // [rank]: its host's index (shared memory on)
  std::vector<std::vector<int>> ranks_on_;  // [host]: its ranks, ascending; the first is the leader
  std::unique_ptr<shm::ShmGroup> shm_;     // this host's ranks, when more than one
  std::unique_ptr<DirectMesh> leaders_;    // the hosts' leaders ("shm+tcp"); on leaders only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  uint64_t seq_ = 0;        // guarded by mu_
  uint32_t next_tag_ = 0;   // guarded by mu_; every rank numbers its collectives alike
  bool worker_running_ = false;  // guarded by mu_: the worker is executing a task
  bool inline_running_ = false;  // guarded by mu_: a blocking caller is executing one

  // Used only by the thread executing a collective (the worker, or a blocking caller): one at a time.
  std::string failure_;  // the first collective error; non-empty makes the group unusable
  std::unique_ptr<char[]> scratch_;
  size_t scratch_bytes_ = 0;

  std::thread worker_;  // last: started once everything above exists
};

}  // namespace lockstep::dist
