// Packed variable-length sequences, as torch.nn.utils.rnn: PackedSequence and pack_padded_sequence,
// pad_packed_sequence, pad_sequence, pack_sequence. nn::LSTM, GRU and RNN run a PackedSequence through
// forward_with_packed_input (nn/rnn.h):
//   auto packed = nn::utils::rnn::pack_padded_sequence(x, lengths, /*batch_first=*/true,
//                                                      /*enforce_sorted=*/false);
//   auto [out, state] = lstm->forward_with_packed_input(packed);
//   auto [padded, lens] = nn::utils::rnn::pad_packed_sequence(out, /*batch_first=*/true);
//
// Layout, as PyTorch's: the batch is sorted by decreasing length (sorted_indices[i] is the original
// index of sorted column i) and data holds, time step after time step, the rows of the sequences still
// running at that step: data [sum(lengths), *], batch_sizes [T] (int64, CPU) the number of rows of each
// step. Every function is composed of index_select, cat and views, so gradients flow through all of them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::nn::utils::rnn {

// A shared handle on its tensors, as PyTorch's namedtuple: copies share data.
class PackedSequence {
 public:
  PackedSequence() = default;
  // unsorted_indices undefined: the inverse permutation of sorted_indices (when that is defined).
  // sorted_indices undefined: the batch is in its original order.
  explicit PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices = {}, Tensor unsorted_indices = {});

  const Tensor& data() const { return data_; }
  const Tensor& batch_sizes() const { return batch_sizes_; }
  const Tensor& sorted_indices() const { return sorted_indices_; }
  const Tensor& unsorted_indices() const { return unsorted_indices_; }
  bool is_cuda() const { return data_.is_cuda(); }
  // The same sequence with data and the indices on `device` (batch_sizes stays on the CPU).
  PackedSequence to(Device device) const;

 private:
  Tensor data_, batch_sizes_, sorted_indices_, unsorted_indices_;
};

// input: [T, B, *] ([B, T, *] with batch_first) padded; lengths: B lengths (any integer or floating
// tensor, or a vector), each in [1, T]. With enforce_sorted the lengths must be decreasing; otherwise
// the batch is sorted here (stably) and the PackedSequence records the permutation.
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths,
                                    bool batch_first = false, bool enforce_sorted = true);

// The inverse: (padded [T', B, *] ([B, T', *] with batch_first) in the original batch order, filled
// with padding_value past each length; lengths int64 [B] on the CPU). T' = total_length when given (at
// least the longest length), else the longest length.
std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                               double padding_value = 0.0,
                                               std::optional<int64_t> total_length = std::nullopt);

// Sequences [L_i, *] (same trailing shape, dtype and device) stacked into [max L, B, *] ([B, max L, *]
// with batch_first), padded with padding_value on the right (padding_side "right") or the left ("left").
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0,
                    const std::string& padding_side = "right");

// pack_padded_sequence(pad_sequence(sequences), their lengths, false, enforce_sorted).
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);

// torch.nn.utils.rnn.invert_permutation: out[p[i]] = i; undefined for undefined.
Tensor invert_permutation(const Tensor& permutation);

namespace detail {
// Each column's length (the batch in the packed, sorted order) read off batch_sizes [T].
std::vector<int64_t> lengths_of(const Tensor& batch_sizes);
// data [N, *] -> [T', B, *] in the packed order, padded rows = padding_value (T' >= T).
Tensor packed_to_padded(const Tensor& data, const Tensor& batch_sizes, double padding_value, int64_t total_length);
// padded [T', B, *] in the packed order -> data [N, *], the rows batch_sizes names.
Tensor padded_to_packed(const Tensor& padded, const Tensor& batch_sizes);
}  // namespace detail

}  // namespace lockstep::nn::utils::rnn
