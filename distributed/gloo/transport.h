// Transport: how ProcessGroupGloo moves a CPU collective between its ranks. The group queues the
// collective (work_queue.h) and, on the thread that runs it, calls one Transport, chosen once when the
// group is created (choose_transport in process_group_gloo.cpp):
//
//   GlooTransport      gloo's own TCP pairs and algorithms (gloo_transport.cpp). Under the others:
//                      broadcast, all_gather and reduce_scatter over TCP, and the setup barrier.
//   MeshTransport      "tcp": all_reduce (exchange or ring), the flat all_gather and reduce_scatter
//                      (ring) and barrier on DirectMesh, lockstep's TCP mesh driven by the calling
//                      thread; the rest through GlooTransport (mesh_transport.cpp).
//   ShmTransport       "shm": every rank on one host; all five collectives through shared memory
//                      (shm_transport.cpp).
//   TwoLevelTransport  "shm+tcp": several hosts, some with several ranks; all_reduce, broadcast and
//                      barrier through shared memory within a host and DirectMesh between the hosts'
//                      leaders; all_gather and reduce_scatter through GlooTransport
//                      (two_level_transport.cpp).
//
// Contract of every method: called by one thread at a time, on every rank in the same order with the
// same tag; in place on the tensors' memory (contiguous CPU tensors of one dtype; world size > 1); AVG
// only where fuses_avg() (elsewhere ProcessGroup sends SUM and divides). Results are the same bits on every rank (a fixed order of reduction).
// Errors throw PeerError or shm::ShmError with the rank at fault already named.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/gloo/algorithms.h"
#include "distributed/gloo/peer_sockets.h"
#include "distributed/store/store.h"
#include "distributed/work.h"
#include "distributed/work_queue.h"
#include "tensor/tensor.h"

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

// How all_reduce moves the data over TCP (GlooOptions::Algorithm).
enum class AllReduceAlgorithm { kAuto, kExchange, kRing, kGlooRing, kGlooBcube };

// All-reduce of n elements over a DirectMesh, the one place the algorithm is chosen (for "tcp"'s mesh
// and "shm+tcp"'s leaders): the exchange where asked for, or under kAuto while a rank sends at most
// exchange_max_bytes in all; else the ring. gloo's own algorithms need gloo's pairs, which a caller with
// them (MeshTransport) runs instead; here they count as kAuto.
template <typename T>
void mesh_all_reduce(DirectMesh& mesh, T* data, size_t n, detail::ReduceFn reduce, uint32_t tag,
                     AllReduceAlgorithm algorithm, size_t exchange_max_bytes, Scratch& scratch) {
  const int W = mesh.size();
  const size_t sent = n * sizeof(T) * static_cast<size_t>(W - 1);
  const bool exchange = algorithm == AllReduceAlgorithm::kExchange ||
                        (algorithm != AllReduceAlgorithm::kRing && sent <= exchange_max_bytes);
  if (exchange) {
    detail::exchange_all_reduce<T>(mesh, data, n, reduce, tag, static_cast<T*>(scratch.get(sent)));
  } else {
    detail::ring_all_reduce<T>(mesh, data, n, reduce, tag, static_cast<T*>(scratch.get((n / W + 1) * sizeof(T))));
  }
}

class Transport {
 public:
  virtual ~Transport() = default;
  // What ProcessGroupGloo::transport() says: "tcp", "shm" or "shm+tcp".
  virtual const char* name() const = 0;
  // One line for the logs: what runs each collective.
  virtual std::string summary() const = 0;
  // True when the reductions take AVG and divide inside their own last pass (ProcessGroup::reduces_avg).
  virtual bool fuses_avg() const { return false; }

  virtual void all_reduce(const Tensor& tensor, ReduceOp op, uint32_t tag) = 0;
  virtual void broadcast(const Tensor& tensor, int root, uint32_t tag) = 0;
  virtual void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t tag) = 0;
  virtual void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, uint32_t tag) = 0;
  virtual void barrier(uint32_t tag) = 0;
  // The flat forms (ProcessGroup::do_all_gather_into_tensor): one-dimensional tensors, `output` (all_gather)
  // or `input` (reduce_scatter) world size times the other's length; the input may be chunk rank of the
  // output, the output chunk rank of the input. By default the chunks go through the two above.
  virtual void all_gather_into_tensor(const Tensor& output, const Tensor& input, uint32_t tag);
  virtual void reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, uint32_t tag);
};

// gloo's TCP full mesh (its event-loop transport) and gloo's algorithms: allreduce (ring, or bcube),
// broadcast, allgather, barrier; reduce_scatter is lockstep's ring on gloo's unbound buffers
// (algorithms.h). gloo's errors come back as PeerError, the ranks whose connections broke named and a
// timeout spelled out.
class GlooTransport : public Transport {
 public:
  // Connects to every other rank through `store` (collective). The device listens on `hostname`, or on
  // interface `iface` when `hostname` is empty.
  GlooTransport(std::shared_ptr<Store> store, int rank, int size, const std::string& hostname, const std::string& iface,
                std::chrono::milliseconds timeout, bool bcube, Scratch& scratch);
  ~GlooTransport() override;

  const char* name() const override { return "tcp"; }
  std::string summary() const override;
  // The device's address ("127.0.0.1:port").
  std::string address() const;

  void all_reduce(const Tensor& tensor, ReduceOp op, uint32_t tag) override;
  void broadcast(const Tensor& tensor, int root, uint32_t tag) override;
  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t tag) override;
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, uint32_t tag) override;
  void barrier(uint32_t tag) override;

 private:
  // Runs `fn`, turning gloo's errors into PeerError(explain(...)).
  template <typename F>
  void guarded(F&& fn);
  // gloo's error text, with the ranks whose connections broke named and a timeout spelled out.
  std::string explain(const std::string& gloo_error) const;

  const int rank_, size_;
  const std::chrono::milliseconds timeout_;
  const bool bcube_;
  Scratch& scratch_;
  PeerSockets peer_sockets_;  // names the ranks whose connection broke
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
};

// "tcp": DirectMesh for all_reduce and barrier, GlooTransport for the rest (and for all_reduce when
// gloo's algorithm is asked for).
class MeshTransport : public Transport {
 public:
  MeshTransport(DirectMesh& mesh, GlooTransport& gloo, AllReduceAlgorithm algorithm, size_t exchange_max_bytes,
                Scratch& scratch);

  const char* name() const override { return "tcp"; }
  std::string summary() const override;

  void all_reduce(const Tensor& tensor, ReduceOp op, uint32_t tag) override;
  void broadcast(const Tensor& tensor, int root, uint32_t tag) override;
  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t tag) override;
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, uint32_t tag) override;
  void barrier(uint32_t tag) override;
  // Around the ring on DirectMesh (algorithms.h): W - 1 steps of one chunk each way, no staging.
  void all_gather_into_tensor(const Tensor& output, const Tensor& input, uint32_t tag) override;
  void reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, uint32_t tag) override;

 private:
  DirectMesh& mesh_;
  GlooTransport& gloo_;
  const AllReduceAlgorithm algorithm_;
  const size_t exchange_max_bytes_;
  Scratch& scratch_;
};

// "shm": every rank of the group on this host.
class ShmTransport : public Transport {
 public:
  explicit ShmTransport(shm::ShmGroup& shm) : shm_(shm) {}

  const char* name() const override { return "shm"; }
  std::string summary() const override;
  bool fuses_avg() const override { return true; }  // the divisor rides along into the fold (shm/fold.h)

  void all_reduce(const Tensor& tensor, ReduceOp op, uint32_t tag) override;
  void broadcast(const Tensor& tensor, int root, uint32_t tag) override;
  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t tag) override;
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, uint32_t tag) override;
  void barrier(uint32_t tag) override;
  void all_gather_into_tensor(const Tensor& output, const Tensor& input, uint32_t tag) override;
  void reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, uint32_t tag) override;

 private:
  shm::ShmGroup& shm_;
};

// "shm+tcp": shared memory within each host, DirectMesh between one leader per host (its lowest rank).
class TwoLevelTransport : public Transport {
 public:
  // `shm`: this host's ranks, null when this rank is alone on its host; `leaders`: the hosts' leaders'
  // mesh, null on ranks that lead no host. host_of[rank] and ranks_on[host] as in shm::HostLayout.
  TwoLevelTransport(int rank, int size, shm::ShmGroup* shm, DirectMesh* leaders, std::vector<int> host_of,
                    std::vector<std::vector<int>> ranks_on, GlooTransport& gloo, AllReduceAlgorithm algorithm,
                    size_t exchange_max_bytes, Scratch& scratch);

  const char* name() const override { return "shm+tcp"; }
  std::string summary() const override;

  void all_reduce(const Tensor& tensor, ReduceOp op, uint32_t tag) override;
  void broadcast(const Tensor& tensor, int root, uint32_t tag) override;
  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t tag) override;
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, uint32_t tag) override;
  void barrier(uint32_t tag) override;

 private:
  template <typename T>
  void all_reduce(T* data, size_t n, ReduceOp op, uint32_t tag);
  // Runs `fn` on the leaders' mesh, naming the ranks behind the leader indices in its errors.
  template <typename F>
  void between_leaders(F&& fn);

  const int rank_, size_;
  shm::ShmGroup* const shm_;
  DirectMesh* const leaders_;
  const std::vector<int> host_of_;
  const std::vector<std::vector<int>> ranks_on_;
  GlooTransport& gloo_;
  const AllReduceAlgorithm algorithm_;  // between the leaders (mesh_all_reduce)
  const size_t exchange_max_bytes_;
  Scratch& scratch_;
};

}  // namespace lockstep::dist
