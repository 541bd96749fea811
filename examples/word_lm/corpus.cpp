// Corpus: word tokens, the dictionary in order of first appearance, the 80/10/10 split by document.
#include "examples/word_lm/corpus.h"

#include <algorithm>

#include "common/check.h"
#include "tensor/factory.h"

namespace lockstep::examples {

int64_t Dictionary::add_word(const std::string& word) {
  auto [it, added] = word2idx_.try_emplace(word, size());
  if (added) idx2word_.push_back(word);
  return it->second;
}

namespace {

// Python's bytes.isspace(): what bytes.split() splits on.
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The lines of `text` as Python's `for line in open(path, "rb")` yields them, without their '\n': a last
// line without '\n' counts, an empty remainder after the last '\n' does not.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

void tokenize_line(const std::string& line, Dictionary& dict, std::vector<int64_t>& out) {
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    if (j > i) out.push_back(dict.add_word(line.substr(i, j - i)));
    i = j;
  }
  out.push_back(dict.add_word("<eos>"));
}

}  // namespace

Corpus::Corpus(const std::string& text) {
  std::vector<std::string> part_lines[3];
  int64_t doc = 0;
  for (const std::string& line : split_lines(text)) {
    const int k = doc % 10 == 8 ? 1 : doc % 10 == 9 ? 2 : 0;
    part_lines[k].push_back(line);
    if (line == "%") ++doc;
  }
  // data.py tokenises train.txt, valid.txt, test.txt in turn, so their words are numbered in that order.
  for (int k = 0; k < 3; ++k)
    for (const std::string& line : part_lines[k]) tokenize_line(line, dictionary_, parts_[k]);
  LOCKSTEP_CHECK(parts_[0].size() >= 2, "Corpus: the train part has ", parts_[0].size(), " tokens (", doc,
                 " documents ending in '%' lines); need at least 2");
}

Tensor batchify(const std::vector<int64_t>& tokens, int64_t bsz, int64_t first_col, int64_t cols, Device device) {
  LOCKSTEP_CHECK(bsz > 0 && first_col >= 0 && cols > 0 && first_col + cols <= bsz,
                 "batchify: need 0 <= first_col < first_col + cols <= bsz, got bsz ", bsz, ", first_col ", first_col,
                 ", cols ", cols);
  const int64_t rows = static_cast<int64_t>(tokens.size()) / bsz;
  LOCKSTEP_CHECK(rows > 0, "batchify: ", tokens.size(), " tokens cannot fill ", bsz, " columns");
  // data.view(bsz, -1).t(): column c holds tokens c*rows .. (c+1)*rows - 1.
  std::vector<int64_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = tokens[(first_col + c) * rows + r];
  return tensor(out, {rows, cols}, device);
}

std::pair<Tensor, Tensor> get_batch(const Tensor& source, int64_t i, int64_t bptt) {
  const int64_t len = std::min(bptt, source.size(0) - 1 - i);
  LOCKSTEP_CHECK(len > 0, "get_batch: row ", i, " leaves no target in a source of ", source.size(0), " rows");
  return {source.slice(0, i, i + len), source.slice(0, i + 1, i + 1 + len).reshape({-1})};
}

}  // namespace lockstep::examples
