// Embedding and F::embedding: index_select on the table (its backward is index_add into the rows).
// EmbeddingBag and F::embedding_bag: the bags' rows selected once ([n, dim], padding left out), then
// reduced into [bags, dim] by index_add (sum, mean) or scatter_reduce's amax, bag ids from the offsets.
#include "nn/embedding.h"

#include <ostream>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn {

Tensor functional::embedding(const Tensor& input, const Tensor& weight, int64_t padding_idx) {
  LOCKSTEP_CHECK(input.defined() && weight.defined(), "embedding: got an undefined tensor");
  LOCKSTEP_CHECK(weight.dim() == 2, "embedding: expected weight [num_embeddings, embedding_dim], got ", weight.shape());
  LOCKSTEP_CHECK(input.dtype() == kInt64 || input.dtype() == kInt32, "embedding: expected int64 or int32 indices, got ",
                 input.dtype());
  Shape out_shape = input.shape();
  out_shape.push_back(weight.size(1));
  Tensor flat = reshape(input, {-1});
  Tensor rows = index_select(weight, 0, flat);
  if (padding_idx >= 0 && weight.requires_grad()) {
    // The padding row's value, without a path for its gradient.
    Tensor keep = unsqueeze(ne(flat, scalar_tensor(static_cast<double>(padding_idx), {kInt64, flat.device()})), 1);
    rows = where(keep, rows, index_select(weight.detach(), 0, flat));
  }
  return reshape(rows, out_shape);
}

namespace {

// The table's sizes checked and padding_idx made non-negative (Embedding's and EmbeddingBag's rule).
std::optional<int64_t> checked_padding(const char* who, int64_t num, int64_t dim, std::optional<int64_t> padding) {
  LOCKSTEP_CHECK(num > 0 && dim > 0, who, ": num_embeddings (", num, ") and embedding_dim (", dim,
                 ") must be positive");
  if (!padding) return padding;
  const int64_t p = *padding;
  LOCKSTEP_CHECK(p >= -num && p < num, who, ": padding_idx ", p, " must be within num_embeddings ", num);
  return p < 0 ? p + num : p;
}

// N(0, 1), the padding row zero.
void reset_table(Tensor& weight, std::optional<int64_t> padding) {
  init::normal_(weight);
  if (padding) {
    NoGradGuard no_grad;
    Tensor row = weight.select(0, *padding);
    internal::fill_(row, 0);
  }
}

}  // namespace

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(" << options.num_embeddings() << ", " << options.embedding_dim();
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ")";
}

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& o) : Module("Embedding"), options(o) {
  options.padding_idx(checked_padding("Embedding", o.num_embeddings(), o.embedding_dim(), o.padding_idx()));
  weight = register_parameter("weight", empty({o.num_embeddings(), o.embedding_dim()}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() { reset_table(weight, options.padding_idx()); }

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  LOCKSTEP_CHECK(indices.defined() && (indices.dtype() == kInt64 || indices.dtype() == kInt32), "Embedding(",
                 options.num_embeddings(), ", ", options.embedding_dim(), "): expected int64 or int32 indices, got ",
                 indices.defined() ? dtype_name(indices.dtype()) : "an undefined tensor");
  return functional::embedding(indices, weight, options.padding_idx().value_or(-1));
}

EmbeddingBagModeArg::EmbeddingBagModeArg(Reduction r)
    : mode_(r == Reduction::Sum ? EmbeddingBagMode::Sum : EmbeddingBagMode::Mean) {
  LOCKSTEP_CHECK(r != Reduction::None, "EmbeddingBag: mode must be kSum, kMean or kMax, got kNone");
}

namespace {

const char* mode_name(EmbeddingBagMode m) {
  return m == EmbeddingBagMode::Sum ? "sum" : m == EmbeddingBagMode::Mean ? "mean" : "max";
}

// Each of input's n indices' bag (int64 [n]) and the number of bags, from offsets as PyTorch reads them.
std::pair<Tensor, int64_t> bag_ids(const Tensor& input, const Tensor& offsets, bool include_last_offset) {
  const Device dev = input.device();
  if (input.dim() == 2) {
    LOCKSTEP_CHECK(!offsets.defined(), "embedding_bag: if offsets is given, then input should be 1D, got input ",
                   input.shape());
    const int64_t bags = input.size(0), size = input.size(1);
    return {repeat_interleave(arange(0, bags, 1, TensorOptions(kInt64, dev)), size), bags};
  }
  LOCKSTEP_CHECK(offsets.defined(), "embedding_bag: offsets has to be a 1D Tensor but got null");
  LOCKSTEP_CHECK(offsets.dim() == 1 && offsets.dtype() == kInt64 && offsets.device() == dev,
                 "embedding_bag: offsets has to be a 1D int64 tensor on ", dev, ", got ", offsets.dtype(), " ",
                 offsets.shape(), " on ", offsets.device());
  const int64_t n = input.size(0);
  const int64_t bags = include_last_offset ? std::max<int64_t>(offsets.size(0) - 1, 0) : offsets.size(0);
  if (supports(dev, Capability::kHostReadable, kInt64) && offsets.size(0) > 0) {
    const std::vector<int64_t> o = offsets.cpu().contiguous().to_vector<int64_t>();
    LOCKSTEP_CHECK(o[0] == 0, "embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch "
                   "has to start from position 0. However, got ", o[0]);
    for (size_t i = 1; i < o.size(); ++i)
      LOCKSTEP_CHECK(o[i] >= o[i - 1] && o[i] <= n, "embedding_bag: offsets must be non-decreasing and at most the "
                     "number of indices (", n, "), got offsets[", i, "] = ", o[i], " after ", o[i - 1]);
    // PyTorch's kernels disagree on a last offset short of n (sum stops there, mean and max run on to n,
    // the autograd path differs again), so it must be n.
    LOCKSTEP_CHECK(!include_last_offset || o.back() == n, "embedding_bag: with include_last_offset the last offset "
                   "must equal the number of indices (", n, "), got ", o.back());
  }
  // bag b holds [offsets[b], offsets[b + 1]) (the last bag: up to n unless include_last_offset)
  Tensor starts = offsets.narrow(0, 0, bags);
  Tensor ends = include_last_offset ? offsets.narrow(0, 1, bags)
                                    : cat({offsets.narrow(0, 1, std::max<int64_t>(bags - 1, 0)),
                                           full({bags > 0 ? 1 : 0}, static_cast<double>(n), TensorOptions(kInt64, dev))});
  Tensor ids = repeat_interleave(ends - starts);
  LOCKSTEP_CHECK(ids.size(0) <= n, "embedding_bag: the bags hold ", ids.size(0), " indices but input has ", n);
  return {ids, bags};
}

}  // namespace

Tensor functional::embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& o) {
  LOCKSTEP_CHECK(input.defined() && weight.defined(), "embedding_bag: got an undefined tensor");
  LOCKSTEP_CHECK(weight.dim() == 2, "embedding_bag: expected weight [num_embeddings, embedding_dim], got ",
                 weight.shape());
  LOCKSTEP_CHECK(input.dtype() == kInt64, "embedding_bag: expected int64 indices, got ", input.dtype());
  LOCKSTEP_CHECK(input.dim() == 1 || input.dim() == 2, "embedding_bag: input has to be 1D or 2D Tensor, but got "
                 "Tensor of dimension ", input.dim());
  const EmbeddingBagMode mode = o.mode().get();
  const Tensor& psw = o.per_sample_weights();
  if (psw.defined()) {
    LOCKSTEP_CHECK(mode == EmbeddingBagMode::Sum, "embedding_bag: per_sample_weights was not None. "
                   "per_sample_weights is only supported for mode='sum' (got mode='", mode_name(mode), "')");
    LOCKSTEP_CHECK(psw.shape() == input.shape(), "embedding_bag: If per_sample_weights (", psw.shape(),
                   ") is not None, then it must have the same shape as the input (", input.shape(), ")");
  }
  auto [ids, bags] = bag_ids(input, o.offsets(), o.include_last_offset());
  Tensor flat = reshape(input, {-1}).narrow(0, 0, ids.size(0));
  Tensor w = psw.defined() ? reshape(psw, {-1}).narrow(0, 0, ids.size(0)) : Tensor();
  if (o.padding_idx()) {
    const int64_t num = weight.size(0), p = *o.padding_idx() < 0 ? *o.padding_idx() + num : *o.padding_idx();
    Tensor keep = reshape(nonzero(ne(flat, scalar_tensor(static_cast<double>(p), {kInt64, flat.device()}))), {-1});
    flat = index_select(flat, 0, keep), ids = index_select(ids, 0, keep);
    if (w.defined()) w = index_select(w, 0, keep);
  }
  Tensor rows = index_select(weight, 0, flat);  // [kept, dim]
  if (w.defined()) rows = rows * unsqueeze(w.to(rows.dtype()), 1);
  Tensor out = zeros({bags, weight.size(1)}, TensorOptions(weight.dtype(), weight.device()));
  if (mode == EmbeddingBagMode::Max)
    return scatter_reduce(out, 0, unsqueeze(ids, 1).expand(rows.shape()), rows, "amax", /*include_self=*/false);
  out = index_add(out, 0, ids, rows);
  if (mode == EmbeddingBagMode::Sum) return out;
  Tensor count = bincount(ids, Tensor(), bags).to(out.dtype());
  return out / unsqueeze(clamp_min(count, 1.0), 1);
}

EmbeddingBagImpl::EmbeddingBagImpl(const EmbeddingBagOptions& o) : Module("EmbeddingBag"), options(o) {
  options.padding_idx(checked_padding("EmbeddingBag", o.num_embeddings(), o.embedding_dim(), o.padding_idx()));
  weight = register_parameter("weight", empty({o.num_embeddings(), o.embedding_dim()}));
  reset_parameters();
}

void EmbeddingBagImpl::reset_parameters() { reset_table(weight, options.padding_idx()); }

Tensor EmbeddingBagImpl::forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights) {
  return functional::embedding_bag(input, weight, functional::EmbeddingBagFuncOptions()
                                                      .offsets(offsets)
                                                      .mode(options.mode())
                                                      .per_sample_weights(per_sample_weights)
                                                      .include_last_offset(options.include_last_offset())
                                                      .padding_idx(options.padding_idx()));
}

}  // namespace lockstep::nn
