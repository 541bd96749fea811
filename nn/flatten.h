// Flatten, as torch.nn.Flatten: dimensions start_dim..end_dim become one (by default all but the
// batch dimension).
#pragma once

#include "autograd/functions.h"
#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) { return lockstep::flatten(input, start_dim, end_dim); }
  int64_t start_dim, end_dim;
};
LOCKSTEP_MODULE(Flatten);

}  // namespace lockstep::nn
