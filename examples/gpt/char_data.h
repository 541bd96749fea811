// CharText: a text as a character-level language-modelling set, nanoGPT's shakespeare_char prepared in
// memory: the vocabulary is the sorted distinct bytes of the text, the first 90% of the tokens train and
// the rest validate. Batches are nanoGPT's get_batch (random windows x = data[i : i+T], y = data[i+1 :
// i+1+T]), but each window's start is a pure function of (seed, split, step, row), so a run is
// reproducible, a resumed run draws the batches it would have drawn, and tools/twins/gpt_twin.py draws the
// same ones. A step's global batch has rows 0, 1, 2, ...; a rank takes its own contiguous rows (see
// batch_rows), so 2 ranks at batch B draw together exactly the windows 1 rank draws at batch 2B.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "examples/common/fortunes.h"
#include "tensor/tensor.h"

namespace lockstep::examples {

enum class Split { kTrain = 0, kVal = 1 };

class CharText {
 public:
  // Throws when the text has fewer than 2 distinct bytes, or is too short for windows of 1 token.
  explicit CharText(const std::string& text);

  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  const std::string& chars() const { return chars_; }  // token i is the byte chars()[i]
  std::vector<int64_t> encode(const std::string& s) const;  // throws on a byte not in the vocabulary
  std::string decode(const std::vector<int64_t>& tokens) const;
  // A split's tokens, one byte each (a token is a byte's index: the vocabulary has at most 256); batches
  // widen them to int64. A byte per token keeps a large text small in every rank.
  const std::vector<uint8_t>& tokens(Split split) const { return split == Split::kTrain ? train_ : val_; }

  // x, y: int64 [rows, block_size] on `device`, for rows first_row .. first_row + rows - 1 of step `step`.
  // Throws when the split is not longer than block_size.
  std::pair<Tensor, Tensor> get_batch(Split split, uint64_t seed, int64_t step, int64_t first_row, int64_t rows,
                                      int64_t block_size, Device device = Device::cpu()) const;

 private:
  std::string chars_;
  int64_t index_[256];
  std::vector<uint8_t> train_, val_;
};

// The start of window `row` of step `step`, in [0, n_windows): splitmix64 applied in turn to the seed,
// then xor-ed with the split, the step and the row. tools/twins/gpt_twin.py's window_start is the same rule.
uint64_t window_start(uint64_t seed, Split split, int64_t step, int64_t row, int64_t n_windows);

// The first global row of rank `rank`'s micro-batch `micro` (of `accum`), each rank taking `batch` rows:
// micro-batches are laid out one after another, ranks in order within each.
inline int64_t batch_rows(int64_t micro, int rank, int world, int64_t batch) {
  return (micro * world + rank) * batch;
}

}  // namespace lockstep::examples
