// Embedding and F::embedding: index_select on the table (its backward is index_add into the rows).
#include "nn/embedding.h"

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
  LOCKSTEP_CHECK(input.dtype() == kInt64, "embedding: expected int64 indices, got ", input.dtype());
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

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& o) : Module("Embedding"), options(o) {
  LOCKSTEP_CHECK(o.num_embeddings() > 0 && o.embedding_dim() > 0, "Embedding: num_embeddings (", o.num_embeddings(),
                 ") and embedding_dim (", o.embedding_dim(), ") must be positive");
  if (o.padding_idx()) {
    int64_t p = *o.padding_idx();
    LOCKSTEP_CHECK(p >= -o.num_embeddings() && p < o.num_embeddings(), "Embedding: padding_idx ", p,
                   " must be within num_embeddings ", o.num_embeddings());
    options.padding_idx(p < 0 ? p + o.num_embeddings() : p);
  }
  weight = register_parameter("weight", empty({o.num_embeddings(), o.embedding_dim()}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (options.padding_idx()) {
    NoGradGuard no_grad;
    Tensor row = weight.select(0, *options.padding_idx());
    internal::fill_(row, 0);
  }
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  LOCKSTEP_CHECK(indices.defined() && indices.dtype() == kInt64, "Embedding(", options.num_embeddings(), ", ",
                 options.embedding_dim(), "): expected int64 indices, got ",
                 indices.defined() ? dtype_name(indices.dtype()) : "an undefined tensor");
  return functional::embedding(indices, weight, options.padding_idx().value_or(-1));
}

}  // namespace lockstep::nn
