// safetensors: lockstep's checkpoint format, readable by Python's safetensors and PyTorch
// (safetensors.torch.load_file) and the other way round. Layout: 8-byte little-endian header length,
// a JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}, then the raw little-endian data.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep {

using TensorList = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsFile {
  TensorList tensors;                          // in file order (sorted by data offset)
  std::map<std::string, std::string> metadata;
};

// Writes atomically: a temporary file in the same directory (`path`.tmp.HOST.PID, HOST being this
// host's name), fsync, then rename over `path`, so a crash mid-save leaves the previous file intact. A
// save that succeeds then removes the temporary files of `path` that killed saves on this host left
// behind (those whose process no longer exists); other hosts' are left to them.
// Tensors on a GPU are copied to the host first.
void save_safetensors(const std::string& path, const TensorList& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Reads and validates the whole file; a truncated or corrupt file is an error naming it and the
// problem. Tensors are loaded on the CPU.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace lockstep
