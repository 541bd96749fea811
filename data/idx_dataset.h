// IdxDataset: MNIST-format (IDX) images and labels as a TensorDataset, e.g. Fashion-MNIST.
//
// An IDX file is a big-endian header, magic 0x000008NN (unsigned bytes, NN dimensions) and NN
// uint32 sizes, then the bytes row-major. Images are 0x00000803 [N, rows, cols], labels 0x00000801
// [N]. Files may be gzip'd or raw (zlib reads either). Every header, size and count is checked; a
// bad file raises lockstep::Error naming the file and what is wrong with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/tensor_dataset.h"

namespace lockstep::data {

// The dimensions and bytes of one IDX file of unsigned bytes.
struct IdxArray {
  Shape dims;
  std::vector<uint8_t> bytes;
};

// Reads `path` (gzip'd or raw), requiring an IDX file of unsigned bytes with `ndims` dimensions whose
// payload is exactly the product of its dimensions.
IdxArray read_idx(const std::string& path, int ndims);

class IdxDataset : public TensorDataset {
 public:
  // Inputs: float32 pixels scaled to [0, 1], then (x - mean) / stddev; [N, rows * cols] when
  // `flatten` (what an MLP consumes), else [N, rows, cols]. Targets: int64 labels [N].
  IdxDataset(const std::string& images_path, const std::string& labels_path, double mean = 0, double stddev = 1,
             bool flatten = true);

 private:
  explicit IdxDataset(std::pair<Tensor, Tensor> inputs_targets)
      : TensorDataset(std::move(inputs_targets.first), std::move(inputs_targets.second)) {}
};

// Debian's dataset-fashion-mnist package, and the pixel statistics of its training split.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

// Fashion-MNIST's training (60000 images) or test (10000) split from `dir`, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte, each gzip'd (.gz) or raw. Standardized with
// kFashionMnistMean / kFashionMnistStd when `normalize`, else left in [0, 1].
std::shared_ptr<IdxDataset> load_fashion_mnist(const std::string& dir = kFashionMnistDir, bool train = true,
                                               bool normalize = true, bool flatten = true);

}  // namespace lockstep::data
