// ProcessGroupGloo: collectives on CPU tensors between processes (c10d's ProcessGroupGloo): the CPU
// process group, over one of several transports (transport.h).
//
//   auto store = std::make_shared<TCPStore>("10.0.0.1", 29500, rank == 0);
//   ProcessGroupGloo pg(store, rank, world_size, std::chrono::seconds(60));
//   pg.all_reduce(grads)->wait();
//
// Construction is collective: every rank connects to every other (gloo's full mesh), exchanging
// addresses through the store under a prefix unique to this group instance, so groups can be created,
// destroyed and created again over one store as long as every rank creates them in the same order.
// The collectives run through the CPU groups' WorkQueue (distributed/work_queue.h): one worker thread in
// the order they were issued, so each Work completes in order and the calls return at once; a blocking
// call (async_op false) issued while nothing is queued runs on the caller's thread instead, as gloo
// called directly would. A collective that fails (a peer died, the timeout passed) leaves the group
// unusable: later collectives fail at once, naming the first error. A peer whose connection
// breaks (its process died) is named, "all_reduce (float32, 1000 elements, SUM) failed on rank 0 of 2:
// lost connection to rank 1 (peer closed the connection; ...)": the group knows its socket to each
// rank (Linux: found through /proc/self/fd when connecting) and looks at which ones broke. Writes to a
// dead peer raise an error, not SIGPIPE: gloo's threads block that signal. Destruction waits for the
// queued collectives, then closes every connection and thread.
//
// Ranks that share a host (distributed/shm/host.h: found through the store, never assumed) run the
// collectives through shared memory (distributed/shm/shm_group.h) instead of loopback TCP:
//   - every rank on one host ("shm"): all five collectives, and the flat all_gather_into_tensor and
//     reduce_scatter_tensor;
//   - several hosts, some with more than one rank ("shm+tcp"): all_reduce, broadcast and barrier in
//     two levels, shared memory within each host and TCP (DirectMesh) between one leader per host, the
//     lowest rank of each host; all_gather and reduce_scatter over TCP;
//   - otherwise ("tcp"), or with GlooOptions::shared_memory false or LOCKSTEP_SHM=0 on any rank: TCP
//     (the flat forms around the ring on DirectMesh, the per-chunk ones on gloo's pairs).
// choose_transport (process_group_gloo.cpp) holds these rules; transport() says which, and with
// LOCKSTEP_DISTRIBUTED_DEBUG=INFO or DETAIL rank 0 prints it once the group is connected:
//   "ProcessGroupGloo: transport shm on 2 ranks: all five collectives through shared memory (ShmGroup)".
// Results are the same bits on every rank either way (a fixed order of reduction), though not always
// the same bits as another transport would give.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/gloo/transport.h"
#include "distributed/net/job_token.h"
#include "distributed/process_group.h"
#include "distributed/store/store.h"
#include "distributed/work_queue.h"

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
  using Algorithm = AllReduceAlgorithm;
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
  std::string transport() const override;
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // The local address gloo listens on (its device), for messages and tests.
  const std::string& address() const { return address_; }

 protected:
  void check_tensor(const Tensor& t, const char* op) const override;
  bool reduces_avg() const override;
  std::shared_ptr<Work> do_all_reduce(Tensor& tensor, ReduceOp op, bool async_op) override;
  std::shared_ptr<Work> do_broadcast(Tensor& tensor, int root, bool async_op) override;
  std::shared_ptr<Work> do_all_gather(std::vector<Tensor>& outputs, const Tensor& input, bool async_op) override;
  std::shared_ptr<Work> do_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                          bool async_op) override;
  std::shared_ptr<Work> do_barrier(bool async_op) override;
  // The flat forms through the transport's own (shared memory, the ring on DirectMesh).
  std::shared_ptr<Work> do_all_gather_into_tensor(Tensor& output, const Tensor& input, bool async_op) override;
  std::shared_ptr<Work> do_reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op,
                                                 bool async_op) override;

 private:
  // Finds the ranks that share this rank's host (collective), picks the transport (choose_transport)
  // and sets up the links it needs: the shared-memory group, the leaders' mesh.
  void setup_shared_memory(Store& store, const std::string& mesh_host);

  Options options_;
  std::string address_;
  Scratch scratch_;  // for the executing collective, whichever transport runs it
  // The links, every one that this rank takes part in; the transport below moves data over them.
  std::unique_ptr<GlooTransport> gloo_;     // gloo's full mesh: always
  std::unique_ptr<DirectMesh> mesh_;        // lockstep's TCP mesh between all ranks: always
  std::unique_ptr<shm::ShmGroup> shm_;      // this host's ranks, when more than one share it
  std::unique_ptr<DirectMesh> leaders_;     // the hosts' leaders ("shm+tcp"); on leaders only
  std::unique_ptr<Transport> transport_;    // the one choose_transport picked

  std::unique_ptr<WorkQueue> queue_;  // last: its worker runs collectives on everything above
};

}  // namespace lockstep::dist
