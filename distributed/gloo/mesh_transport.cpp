// MeshTransport ("tcp"): all_reduce, the flat all_gather and reduce_scatter and barrier on DirectMesh,
// driven by the calling thread; broadcast and the per-chunk all_gather and reduce_scatter on gloo's pairs.
#include "distributed/gloo/algorithms.h"
#include "distributed/gloo/direct_mesh.h"
#include "distributed/gloo/transport.h"
#include "distributed/process_group.h"

#include <cstring>

namespace lockstep::dist {

MeshTransport::MeshTransport(DirectMesh& mesh, GlooTransport& gloo, AllReduceAlgorithm algorithm,
                             size_t exchange_max_bytes, Scratch& scratch)
    : mesh_(mesh), gloo_(gloo), algorithm_(algorithm), exchange_max_bytes_(exchange_max_bytes), scratch_(scratch) {}

std::string MeshTransport::summary() const {
  const char* all_reduce = algorithm_ == AllReduceAlgorithm::kExchange    ? "exchange"
                           : algorithm_ == AllReduceAlgorithm::kRing      ? "ring"
                           : algorithm_ == AllReduceAlgorithm::kGlooRing  ? "gloo's ring"
                           : algorithm_ == AllReduceAlgorithm::kGlooBcube ? "gloo's bcube"
                                                                          : "exchange or ring by size";
  return lockstep::detail::str_cat("all_reduce ", all_reduce, ", barrier, all_gather_into_tensor and "
                                   "reduce_scatter_tensor (ring) on DirectMesh; broadcast and the per-chunk all_gather "
                                   "and reduce_scatter on gloo's TCP pairs");
}

void MeshTransport::all_reduce(const Tensor& tensor, ReduceOp op, uint32_t tag) {
  if (algorithm_ == AllReduceAlgorithm::kGlooRing || algorithm_ == AllReduceAlgorithm::kGlooBcube) {
    return gloo_.all_reduce(tensor, op, tag);
  }
  dispatch(tensor.dtype(), [&](auto t) {
    using T = typename decltype(t)::type;
    T* data = static_cast<T*>(tensor.data_ptr());
    const size_t n = static_cast<size_t>(tensor.numel());
    const auto reduce = detail::reduce_fn<T>(op);
    mesh_all_reduce<T>(mesh_, data, n, reduce, tag, algorithm_, exchange_max_bytes_, scratch_);
  });
}

void MeshTransport::broadcast(const Tensor& tensor, int root, uint32_t tag) { gloo_.broadcast(tensor, root, tag); }

void MeshTransport::all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t tag) {
  gloo_.all_gather(outputs, input, tag);
}

void MeshTransport::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, uint32_t tag) {
  gloo_.reduce_scatter(output, inputs, op, tag);
}

void MeshTransport::all_gather_into_tensor(const Tensor& output, const Tensor& input, uint32_t tag) {
  char* out = static_cast<char*>(output.data_ptr());
  const size_t bytes = input.nbytes();
  char* mine = out + bytes * static_cast<size_t>(mesh_.rank());
  if (mine != input.data_ptr()) std::memcpy(mine, input.data_ptr(), bytes);
  detail::ring_all_gather(mesh_, out, bytes, tag);
}

void MeshTransport::reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, uint32_t tag) {
  dispatch(output.dtype(), [&](auto t) {
    using T = typename decltype(t)::type;
    T* out = static_cast<T*>(output.data_ptr());
    const size_t n = static_cast<size_t>(output.numel());
    detail::ring_reduce_scatter<T>(mesh_, static_cast<const T*>(input.data_ptr()), out, n, detail::reduce_fn<T>(op), tag,
                                   static_cast<T*>(scratch_.get(2 * n * sizeof(T))));
  });
}

void MeshTransport::barrier(uint32_t tag) {
  // Every rank sends every other an empty message and waits for theirs: one message latency.
  mesh_.exchange(nullptr, nullptr, 0, tag);
}

}  // namespace lockstep::dist
