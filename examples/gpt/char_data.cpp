// CharText: vocabulary, 90/10 split and reproducible random windows.
#include "examples/gpt/char_data.h"

#include <algorithm>

#include "common/check.h"
#include "tensor/factory.h"

namespace lockstep::examples {

CharText::CharText(const std::string& text) {
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  std::fill(std::begin(index_), std::end(index_), -1);
  for (int c = 0; c < 256; ++c)
    if (seen[c]) {
      index_[c] = static_cast<int64_t>(chars_.size());
      chars_ += static_cast<char>(c);
    }
  LOCKSTEP_CHECK(chars_.size() >= 2, "CharText: the text needs at least 2 distinct characters, got ", chars_.size(),
                 " in ", text.size(), " bytes");
  const size_t n = text.size() * 9 / 10;  // int(n * 0.9), as nanoGPT's prepare.py
  train_.reserve(n);
  val_.reserve(text.size() - n);
  for (size_t i = 0; i < text.size(); ++i)
    (i < n ? train_ : val_).push_back(static_cast<uint8_t>(index_[static_cast<unsigned char>(text[i])]));
}

std::vector<int64_t> CharText::encode(const std::string& s) const {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    LOCKSTEP_CHECK(index_[c] >= 0, "CharText::encode: byte ", int(c), " is not in the vocabulary");
    out.push_back(index_[c]);
  }
  return out;
}

std::string CharText::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  for (int64_t t : tokens) {
    LOCKSTEP_CHECK(t >= 0 && t < vocab_size(), "CharText::decode: token ", t, " is outside [0, ", vocab_size(), ")");
    out += chars_[t];
  }
  return out;
}

namespace {
uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t window_start(uint64_t seed, Split split, int64_t step, int64_t row, int64_t n_windows) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<uint64_t>(split));
  h = splitmix64(h ^ static_cast<uint64_t>(step));
  h = splitmix64(h ^ static_cast<uint64_t>(row));
  return h % static_cast<uint64_t>(n_windows);
}

std::pair<Tensor, Tensor> CharText::get_batch(Split split, uint64_t seed, int64_t step, int64_t first_row,
                                              int64_t rows, int64_t block_size, Device device) const {
  const std::vector<uint8_t>& data = tokens(split);
  const int64_t n_windows = static_cast<int64_t>(data.size()) - block_size;
  LOCKSTEP_CHECK(n_windows > 0, "CharText::get_batch: the ", split == Split::kTrain ? "train" : "val", " split has ",
                 data.size(), " tokens, not more than block_size ", block_size, " (use a longer text or a smaller "
                 "--block-size)");
  LOCKSTEP_CHECK(rows > 0 && first_row >= 0 && step >= 0, "CharText::get_batch: rows must be positive and first_row, "
                 "step non-negative, got rows ", rows, ", first_row ", first_row, ", step ", step);
  std::vector<int64_t> x(rows * block_size), y(rows * block_size);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = static_cast<int64_t>(window_start(seed, split, step, first_row + r, n_windows));
    std::copy_n(data.begin() + i, block_size, x.begin() + r * block_size);
    std::copy_n(data.begin() + i + 1, block_size, y.begin() + r * block_size);
  }
  return {tensor(x, {rows, block_size}, device), tensor(y, {rows, block_size}, device)};
}

}  // namespace lockstep::examples
