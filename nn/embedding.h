// Embedding, as torch.nn.Embedding: a lookup table [num_embeddings, embedding_dim], N(0, 1) at start.
// EmbeddingBag, as torch.nn.EmbeddingBag: the sum, mean or max of each bag's rows, without the
// [bags, bag size, dim] tensor in between:
//   nn::EmbeddingBag bag(nn::EmbeddingBagOptions(1000, 64).mode(nn::kSum));
//   Tensor y = bag(indices, offsets);                      // indices [n], offsets [bags] -> [bags, 64]
#pragma once

#include <optional>

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"
#include "tensor/tensor.h"

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
  void pretty_print(std::ostream& os) const override;
  EmbeddingOptions options;
  Tensor weight;
};
LOCKSTEP_MODULE(Embedding);

// EmbeddingBag's reduction: nn::kSum, nn::kMean (the default) or nn::kMax, LibTorch's spellings.
enum class EmbeddingBagMode { Sum, Mean, Max };
struct kMaxTag {};
inline constexpr kMaxTag kMax{};
class EmbeddingBagModeArg {
 public:
  EmbeddingBagModeArg(Reduction r);  // NOLINT: .mode(nn::kSum); kNone is an error
  constexpr EmbeddingBagModeArg(kMaxTag) : mode_(EmbeddingBagMode::Max) {}  // NOLINT
  constexpr EmbeddingBagMode get() const { return mode_; }

 private:
  EmbeddingBagMode mode_ = EmbeddingBagMode::Mean;
};

struct EmbeddingBagOptions {
  EmbeddingBagOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  LOCKSTEP_ARG(int64_t, num_embeddings, 0);
  LOCKSTEP_ARG(int64_t, embedding_dim, 0);
  LOCKSTEP_ARG(EmbeddingBagModeArg, mode, Reduction::Mean);
  // offsets holds bags + 1 entries, the last one the number of indices (CSR's form).
  LOCKSTEP_ARG(bool, include_last_offset, false);
  // Indices equal to it are left out of their bag (its mean and its max too); the row starts at zero.
  LOCKSTEP_ARG(std::optional<int64_t>, padding_idx, std::nullopt);
};

namespace functional {
struct EmbeddingBagFuncOptions {
  LOCKSTEP_ARG(Tensor, offsets, {});
  LOCKSTEP_ARG(EmbeddingBagModeArg, mode, Reduction::Mean);
  LOCKSTEP_ARG(Tensor, per_sample_weights, {});  // mode kSum only: each index's row scaled by its weight
  LOCKSTEP_ARG(bool, include_last_offset, false);
  LOCKSTEP_ARG(std::optional<int64_t>, padding_idx, std::nullopt);
};
// torch.nn.functional.embedding_bag: input int64 [bags, bag size] (offsets undefined) or [n] with
// offsets int64 [bags] (each bag's first position; [bags + 1] with include_last_offset) -> [bags, dim];
// an empty bag gives zeros.
Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagFuncOptions& options = {});
}  // namespace functional

class EmbeddingBagImpl : public Module {
 public:
  explicit EmbeddingBagImpl(const EmbeddingBagOptions& options);
  EmbeddingBagImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingBagImpl(EmbeddingBagOptions(num_embeddings, embedding_dim)) {}
  void reset_parameters();
  Tensor forward(const Tensor& input, const Tensor& offsets = {}, const Tensor& per_sample_weights = {});
  EmbeddingBagOptions options;
  Tensor weight;
};
LOCKSTEP_MODULE(EmbeddingBag);

}  // namespace lockstep::nn
