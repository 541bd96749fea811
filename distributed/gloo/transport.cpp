// Transport: the flat collectives' default, the chunks of the flat tensor handed to the per-chunk forms.
#include "distributed/gloo/transport.h"

#include "tensor/ops.h"

namespace lockstep::dist {

namespace {
std::vector<Tensor> chunks(const Tensor& flat, int64_t n) {
  std::vector<Tensor> out;
  for (int64_t at = 0; at < flat.numel(); at += n) out.push_back(internal::view_range(flat, at, {n}));
  return out;
}
}  // namespace

void Transport::all_gather_into_tensor(const Tensor& output, const Tensor& input, uint32_t tag) {
  all_gather(chunks(output, input.numel()), input, tag);
}

void Transport::reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, uint32_t tag) {
  reduce_scatter(output, chunks(input, output.numel()), op, tag);
}

}  // namespace lockstep::dist
