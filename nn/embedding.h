// Embedding, as torch.nn.Embedding: a lookup table [num_embeddings, embedding_dim], N(0, 1) at start.
#pragma once

#include <optional>

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"

namespace lockstep::nn {

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  LOCKSTEP_ARG(int64_t, num_embeddings, 0);
  LOCKSTEP_ARG(int64_t, embedding_dim, 0);
  // This row starts at zero and receives no gradient (negative values count from the end).
  LOCKSTEP_ARG(std::optional<int64_t>, padding_idx, std::nullopt);
};

class EmbeddingImpl : public Module {
 public:
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  void reset_parameters();
  Tensor forward(const Tensor& indices);  // int64 [...] -> [..., embedding_dim]
  EmbeddingOptions options;
  Tensor weight;
};
LOCKSTEP_MODULE(Embedding);

}  // namespace lockstep::nn
