// Packed sequences (nn/utils/rnn.h): packing and padding as row gathers (index_select) between the
// padded [T, B, *] layout and the packed rows, so autograd differentiates them.
#include "nn/utils/rnn.h"

#include <algorithm>
#include <numeric>

#include "autograd/functions.h"
#include "tensor/factory.h"

namespace lockstep::nn::utils::rnn {

namespace {

Shape trailing(const Tensor& t, int64_t from) { return Shape(std::vector<int64_t>(t.shape().begin() + from, t.shape().end())); }

Shape with_front(std::vector<int64_t> front, const Shape& rest) {
  front.insert(front.end(), rest.begin(), rest.end());
  return Shape(front);
}

// An integer tensor's values (batch_sizes, a permutation), read on the CPU.
std::vector<int64_t> int_values(const Tensor& t) {
  return t.to(Device::cpu()).to(kInt64).contiguous().to_vector<int64_t>();
}

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  return tensor(v, {static_cast<int64_t>(v.size())}).to(device);
}

}  // namespace

PackedSequence::PackedSequence(Tensor data, Tensor batch_sizes, Tensor sorted_indices, Tensor unsorted_indices)
    : data_(std::move(data)), batch_sizes_(std::move(batch_sizes)), sorted_indices_(std::move(sorted_indices)),
      unsorted_indices_(std::move(unsorted_indices)) {
  LOCKSTEP_CHECK(data_.defined() && data_.dim() >= 1, "PackedSequence: data must be a tensor of at least 1 dimension");
  LOCKSTEP_CHECK(batch_sizes_.defined() && batch_sizes_.dim() == 1 && batch_sizes_.device().is_cpu(),
                 "PackedSequence: batch_sizes should always be a 1-D CPU int64 tensor, got ",
                 batch_sizes_.defined() ? batch_sizes_.shape() : Shape{}, " on ",
                 batch_sizes_.defined() ? batch_sizes_.device().str() : "nothing");
  const std::vector<int64_t> bs = int_values(batch_sizes_);
  int64_t total = 0;
  for (size_t t = 0; t < bs.size(); ++t) {
    LOCKSTEP_CHECK(bs[t] > 0 && (t == 0 || bs[t] <= bs[t - 1]), "PackedSequence: batch_sizes must be positive and ",
                   "non-increasing, got ", bs[t], " at step ", t);
    total += bs[t];
  }
  LOCKSTEP_CHECK(total == data_.size(0), "PackedSequence: batch_sizes sum to ", total, " but data has ", data_.size(0),
                 " rows (data ", data_.shape(), ")");
  if (sorted_indices_.defined()) {
    LOCKSTEP_CHECK(sorted_indices_.dim() == 1 && (bs.empty() || sorted_indices_.size(0) == bs[0]),
                   "PackedSequence: sorted_indices ", sorted_indices_.shape(), " should hold one index per sequence (",
                   bs.empty() ? 0 : bs[0], ")");
    if (!unsorted_indices_.defined()) unsorted_indices_ = invert_permutation(sorted_indices_);
  }
}

PackedSequence PackedSequence::to(Device device) const {
  auto move = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  return PackedSequence(move(data_), batch_sizes_, move(sorted_indices_), move(unsorted_indices_));
}

Tensor invert_permutation(const Tensor& permutation) {
  if (!permutation.defined()) return {};
  const std::vector<int64_t> p = int_values(permutation);
  std::vector<int64_t> inv(p.size(), -1);
  for (size_t i = 0; i < p.size(); ++i) {
    LOCKSTEP_CHECK(p[i] >= 0 && p[i] < static_cast<int64_t>(p.size()) && inv[p[i]] < 0,
                   "invert_permutation: ", permutation.shape(), " is not a permutation (entry ", i, " is ", p[i], ")");
    inv[p[i]] = static_cast<int64_t>(i);
  }
  return index_tensor(inv, permutation.device());
}

namespace detail {

std::vector<int64_t> lengths_of(const Tensor& batch_sizes) {
  const std::vector<int64_t> bs = int_values(batch_sizes);
  std::vector<int64_t> lengths(bs.empty() ? 0 : bs[0], 0);
  for (int64_t n : bs)
    for (int64_t b = 0; b < n; ++b) ++lengths[b];
  return lengths;
}

Tensor packed_to_padded(const Tensor& data, const Tensor& batch_sizes, double padding_value, int64_t total_length) {
  const std::vector<int64_t> bs = int_values(batch_sizes);
  const int64_t B = bs.empty() ? 0 : bs[0], N = data.size(0);
  // Row N of `rows` is the padding row; idx[t * B + b] = the packed row of (t, b), or N past its length.
  std::vector<int64_t> idx(total_length * B, N);
  int64_t row = 0;
  for (size_t t = 0; t < bs.size(); ++t)
    for (int64_t b = 0; b < bs[t]; ++b) idx[t * B + b] = row++;
  const Shape rest = trailing(data, 1);
  Tensor pad = full(with_front({1}, rest), padding_value, TensorOptions(data.dtype(), data.device()));
  Tensor rows = cat({data, pad}, 0);                                                // [N + 1, *]
  return reshape(index_select(rows, 0, index_tensor(idx, data.device())), with_front({total_length, B}, rest));
}

Tensor padded_to_packed(const Tensor& padded, const Tensor& batch_sizes) {
  const std::vector<int64_t> bs = int_values(batch_sizes);
  const int64_t B = padded.size(1);
  std::vector<int64_t> idx;
  for (size_t t = 0; t < bs.size(); ++t)
    for (int64_t b = 0; b < bs[t]; ++b) idx.push_back(static_cast<int64_t>(t) * B + b);
  const Shape rest = trailing(padded, 2);
  Tensor rows = reshape(padded, with_front({padded.size(0) * B}, rest));  // [T' * B, *]
  return index_select(rows, 0, index_tensor(idx, padded.device()));
}

}  // namespace detail

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first, bool enforce_sorted) {
  LOCKSTEP_CHECK(lengths.defined() && lengths.dim() == 1, "pack_padded_sequence: 'lengths' should be a 1-D tensor, got ",
                 lengths.defined() ? lengths.shape() : Shape{});
  return pack_padded_sequence(input, lengths.to(Device::cpu()).to(kInt64).contiguous().to_vector<int64_t>(),
                              batch_first, enforce_sorted);
}

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  LOCKSTEP_CHECK(input.defined() && input.dim() >= 2 && input.numel() > 0,
                 "pack_padded_sequence: Cannot pack empty tensors (input ", input.defined() ? input.shape() : Shape{},
                 "; expected [T, B, *] or, with batch_first, [B, T, *])");
  Tensor x = batch_first ? transpose(input, 0, 1) : input;  // x: [T, B, *]
  const int64_t T = x.size(0), B = x.size(1);
  LOCKSTEP_CHECK(static_cast<int64_t>(lengths.size()) == B, "pack_padded_sequence: Expected `len(lengths)` to be equal ",
                 "to batch_size, but got ", lengths.size(), " (batch_size=", B, ")");
  for (int64_t len : lengths) {
    LOCKSTEP_CHECK(len > 0, "pack_padded_sequence: Length of all samples has to be greater than 0, but found an ",
                   "element in 'lengths' that is <= 0");
    LOCKSTEP_CHECK(len <= T, "pack_padded_sequence: length ", len, " is longer than the input's ", T,
                   " time steps (input ", input.shape(), ", batch_first=", batch_first, ")");
  }
  std::vector<int64_t> order(B);
  std::iota(order.begin(), order.end(), 0);
  Tensor sorted_indices;
  if (enforce_sorted) {
    for (int64_t b = 1; b < B; ++b)
      LOCKSTEP_CHECK(lengths[b] <= lengths[b - 1], "pack_padded_sequence: `lengths` array must be sorted in decreasing ",
                     "order when `enforce_sorted` is True. You can pass `enforce_sorted=False` to pack_padded_sequence ",
                     "and/or pack_sequence to sidestep this requirement if you do not need ONNX exportability.");
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
    sorted_indices = index_tensor(order, input.device());
    x = index_select(x, 1, sorted_indices);
  }
  std::vector<int64_t> bs(lengths[order[0]], 0);  // the longest sequence sets the steps
  for (int64_t b : order)
    for (int64_t t = 0; t < lengths[b]; ++t) ++bs[t];
  Tensor batch_sizes = tensor(bs, {static_cast<int64_t>(bs.size())});
  return PackedSequence(detail::padded_to_packed(x, batch_sizes), batch_sizes, sorted_indices);
}

std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first, double padding_value,
                                               std::optional<int64_t> total_length) {
  LOCKSTEP_CHECK(sequence.data().defined(), "pad_packed_sequence: the PackedSequence is empty");
  int64_t T = sequence.batch_sizes().size(0);
  if (total_length) {
    LOCKSTEP_CHECK(*total_length >= T, "pad_packed_sequence: Expected total_length to be at least the length of the ",
                   "longest sequence in input, but got total_length=", *total_length, " and max sequence length being ",
                   T);
    T = *total_length;
  }
  Tensor padded = detail::packed_to_padded(sequence.data(), sequence.batch_sizes(), padding_value, T);  // [T, B, *]
  std::vector<int64_t> lengths = detail::lengths_of(sequence.batch_sizes());
  if (sequence.unsorted_indices().defined()) {
    padded = index_select(padded, 1, sequence.unsorted_indices());
    const std::vector<int64_t> sorted = lengths, unsort = int_values(sequence.unsorted_indices());
    for (size_t b = 0; b < lengths.size(); ++b) lengths[b] = sorted.at(unsort.at(b));
  }
  return {batch_first ? transpose(padded, 0, 1) : padded, tensor(lengths, {static_cast<int64_t>(lengths.size())})};
}

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value,
                    const std::string& padding_side) {
  LOCKSTEP_CHECK(!sequences.empty(), "pad_sequence: received an empty list of sequences");
  LOCKSTEP_CHECK(padding_side == "right" || padding_side == "left", "pad_sequence: Expected padding_side to be one of ",
                 "left or right, but got ", padding_side, ".");
  const Tensor& first = sequences[0];
  LOCKSTEP_CHECK(first.defined() && first.dim() >= 1, "pad_sequence: sequence 0 must have at least 1 dimension");
  const Shape rest = trailing(first, 1);
  int64_t T = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    LOCKSTEP_CHECK(s.defined() && s.dim() >= 1 && trailing(s, 1) == rest, "pad_sequence: sequence ", i, " has shape ",
                   s.defined() ? s.shape() : Shape{}, ", expected [L, ", rest, "] as sequence 0 ", first.shape());
    LOCKSTEP_CHECK(s.dtype() == first.dtype() && s.device() == first.device(), "pad_sequence: sequence ", i, " is ",
                   s.dtype(), " on ", s.device(), ", sequence 0 ", first.dtype(), " on ", first.device());
    T = std::max(T, s.size(0));
  }
  std::vector<Tensor> columns;  // each [T, *]
  for (const Tensor& s : sequences) {
    const int64_t missing = T - s.size(0);
    if (missing == 0) {
      columns.push_back(s);
      continue;
    }
    Tensor pad = full(with_front({missing}, rest), padding_value, TensorOptions(s.dtype(), s.device()));
    columns.push_back(padding_side == "right" ? cat({s, pad}, 0) : cat({pad, s}, 0));
  }
  return stack(columns, batch_first ? 0 : 1);
}

PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted) {
  std::vector<int64_t> lengths;
  for (const Tensor& s : sequences) lengths.push_back(s.defined() && s.dim() >= 1 ? s.size(0) : 0);
  return pack_padded_sequence(pad_sequence(sequences), lengths, false, enforce_sorted);
}

}  // namespace lockstep::nn::utils::rnn
