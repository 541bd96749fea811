// ShmTransport ("shm"): every rank of the group shares this host; all five collectives through the
// shared-memory segment (distributed/shm/shm_group.h).
#include "distributed/gloo/transport.h"
#include "distributed/shm/shm_group.h"

namespace lockstep::dist {

std::string ShmTransport::summary() const {
  return std::string("all five collectives through shared memory (ShmGroup)") +
         (shm_.direct_reads() ? "; large all_gathers and reduce_scatters read the others' memory directly" : "");
}

void ShmTransport::all_reduce(const Tensor& tensor, ReduceOp op, uint32_t) {
  shm_.all_reduce(tensor.data_ptr(), static_cast<size_t>(tensor.numel()), tensor.dtype(), op, shm_.size());
}

void ShmTransport::broadcast(const Tensor& tensor, int root, uint32_t) {
  shm_.broadcast(tensor.data_ptr(), tensor.nbytes(), root);
}

void ShmTransport::all_gather(const std::vector<Tensor>& outputs, const Tensor& input, uint32_t) {
  std::vector<void*> out(outputs.size());
  for (size_t r = 0; r < outputs.size(); ++r) out[r] = outputs[r].data_ptr();
  shm_.all_gather(input.data_ptr(), out, input.nbytes());
}

void ShmTransport::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, uint32_t) {
  std::vector<const void*> in(inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r) in[r] = inputs[r].data_ptr();
  shm_.reduce_scatter(in, output.data_ptr(), static_cast<size_t>(output.numel()), output.dtype(), op, shm_.size());
}

void ShmTransport::barrier(uint32_t) { shm_.barrier(); }

// The flat forms: pointers into the one buffer, no tensor per chunk; large ones read the other ranks'
// memory directly where the host allows it (ShmGroup::direct_reads).
void ShmTransport::all_gather_into_tensor(const Tensor& output, const Tensor& input, uint32_t) {
  std::vector<void*> out(shm_.size());
  for (size_t r = 0; r < out.size(); ++r) out[r] = static_cast<char*>(output.data_ptr()) + r * input.nbytes();
  shm_.all_gather(input.data_ptr(), out, input.nbytes());
}

void ShmTransport::reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, uint32_t) {
  shm_.reduce_scatter_flat(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), output.dtype(), op,
                           shm_.size());
}

}  // namespace lockstep::dist
