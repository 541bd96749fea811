// TwoLevelTransport ("shm+tcp"): shared memory within each host, DirectMesh between the hosts' leaders
// (each host's lowest rank) for all_reduce, broadcast and barrier; all_gather and reduce_scatter over
// gloo's TCP pairs.
#include <algorithm>

#include "distributed/gloo/algorithms.h"
#include "distributed/gloo/direct_mesh.h"
#include "distributed/gloo/transport.h"
#include "distributed/process_group.h"
#include "distributed/shm/shm_group.h"

namespace lockstep::dist {

using lockstep::detail::str_cat;

TwoLevelTransport::TwoLevelTransport(int rank, int size, shm::ShmGroup* shm, DirectMesh* leaders,
                                     std::vector<int> host_of, std::vector<std::vector<int>> ranks_on,
                                     GlooTransport& gloo, AllReduceAlgorithm algorithm, size_t exchange_max_bytes,
                                     Scratch& scratch)
    : rank_(rank),
      size_(size),
      shm_(shm),
      leaders_(leaders),
      host_of_(std::move(host_of)),
      ranks_on_(std::move(ranks_on)),
      gloo_(gloo),
      algorithm_(algorithm),
      exchange_max_bytes_(exchange_max_bytes),
      scratch_(scratch) {}

std::string TwoLevelTransport::summary() const {
  return str_cat(ranks_on_.size(), " hosts: all_reduce, broadcast and barrier through shared memory within a host "
                 "and DirectMesh between the hosts' leaders; all_gather and reduce_scatter on gloo's TCP pairs");
}

// DirectMesh's errors on the leaders' mesh name leader indices: say which ranks those are.
template <typename F>
void TwoLevelTransport::between_leaders(F&& fn) {
  try {
    fn();
  } catch (const PeerError& e) {
    std::string who;
    for (size_t h = 0; h < ranks_on_.size(); ++h) {
      who += str_cat(h ? ", " : "", "rank ", h, " there is rank ", ranks_on_[h][0]);
    }
    throw PeerError(str_cat("between the hosts' leaders (", who, "): ", e.what()));
  }
}

void TwoLevelTransport::all_reduce(const Tensor& tensor, ReduceOp op, uint32_t tag) {
  dispatch(tensor.dtype(), [&](auto t) {
    using T = typename decltype(t)::type;
    all_reduce<T>(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()), op, tag);
  });
}

template <typename T>
void TwoLevelTransport::all_reduce(T* data, size_t n, ReduceOp op, uint32_t tag) {
  // Reduces within each host, across the leaders, then the leader's result to its host.
  const auto reduce = detail::reduce_fn<T>(op);
  if (shm_) shm_->all_reduce(data, n, dtype_of<T>::value, op, 1);
  if (leaders_) {
    between_leaders(
        [&] { mesh_all_reduce<T>(*leaders_, data, n, reduce, tag, algorithm_, exchange_max_bytes_, scratch_); });
  }
  if (shm_) shm_->broadcast(data, n * sizeof(T), 0);
}

void TwoLevelTransport::broadcast(const Tensor& tensor, int root, uint32_t tag) {
  void* data = tensor.data_ptr();
  const size_t bytes = tensor.nbytes();
  const int root_host = host_of_[root], host = host_of_[rank_];
  const std::vector<int>& on_root_host = ranks_on_[root_host];
  // The root to its host's ranks (its leader among them), the root host's leader to the other
  // leaders, each leader to its host.
  if (shm_ && host == root_host) {
    shm_->broadcast(data, bytes, static_cast<int>(std::find(on_root_host.begin(), on_root_host.end(), root) -
                                                  on_root_host.begin()));
  }
  if (leaders_) {
    between_leaders([&] {
      std::vector<DirectMesh::Message> messages;
      if (host == root_host) {
        for (int h = 0; h < leaders_->size(); ++h) {
          if (h != host) messages.push_back({h, data, bytes, nullptr, 0, true, false});
        }
      } else {
        messages.push_back({root_host, nullptr, 0, data, bytes, false, true});
      }
      leaders_->transfer(messages, tag);
    });
  }
  if (shm_ && host != root_host) shm_->broadcast(data, bytes, 0);
}

void TwoLevelTransport::all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t tag) {
  gloo_.all_gather(outputs, input, tag);
}

void TwoLevelTransport::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op,
                                       uint32_t tag) {
  gloo_.reduce_scatter(output, inputs, op, tag);
}

void TwoLevelTransport::barrier(uint32_t tag) {
  if (shm_) shm_->barrier();
  if (leaders_) between_leaders([&] { leaders_->exchange(nullptr, nullptr, 0, tag); });
  if (shm_) shm_->barrier();
}

}  // namespace lockstep::dist
