// Corpus: pytorch/examples word_language_model's data.py for one text split three ways. A line is its
// whitespace-separated words plus "<eos>" (Python's bytes.split(): space, \t, \n, \r, \v, \f); the
// dictionary numbers words in order of first appearance over train, then valid, then test, as data.py
// tokenising train.txt, valid.txt and test.txt in turn.
//
// The split: the text is cut into documents, each ending at a line that is exactly "%" (the separator
// of a fortune file) or at the end of the text; document k goes to valid when k % 10 == 8, to test when
// k % 10 == 9, else to train (80/10/10 by fortune, so the three sets draw on every fortune file alike and
// no fortune is cut in two). tools/twins/word_lm_twin.py applies the same rule to the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep::examples {

class Dictionary {
 public:
  int64_t add_word(const std::string& word);  // its index, adding it at the end when new
  int64_t size() const { return static_cast<int64_t>(idx2word_.size()); }
  const std::string& word(int64_t i) const { return idx2word_.at(static_cast<size_t>(i)); }

 private:
  std::unordered_map<std::string, int64_t> word2idx_;
  std::vector<std::string> idx2word_;
};

enum class Part { kTrain = 0, kValid = 1, kTest = 2 };

class Corpus {
 public:
  // Throws when the train part has fewer than 2 tokens (nothing to predict).
  explicit Corpus(const std::string& text);

  const Dictionary& dictionary() const { return dictionary_; }
  const std::vector<int64_t>& tokens(Part part) const { return parts_[static_cast<int>(part)]; }

 private:
  Dictionary dictionary_;
  std::vector<int64_t> parts_[3];
};

// data.py's batchify: the tokens cut to a multiple of bsz and laid out in bsz columns, each a contiguous
// stretch of the text: int64 [len / bsz, bsz]. Then columns [first_col, first_col + cols) only: a rank's
// share of the batch. Throws when there are fewer tokens than columns.
Tensor batchify(const std::vector<int64_t>& tokens, int64_t bsz, int64_t first_col, int64_t cols,
                Device device = Device::cpu());

// main.py's get_batch: rows i .. i+len-1 as input and i+1 .. i+len as target (flattened to [len * cols]),
// len = min(bptt, rows - 1 - i).
std::pair<Tensor, Tensor> get_batch(const Tensor& source, int64_t i, int64_t bptt);

}  // namespace lockstep::examples
