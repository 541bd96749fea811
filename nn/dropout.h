// Dropout, as torch.nn.Dropout: in train() each element is zeroed with probability p and the rest
// scaled by 1 / (1 - p); in eval() the input passes through unchanged.
#pragma once

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5) : Module("Dropout"), p(p) {
    LOCKSTEP_CHECK(p >= 0 && p <= 1, "Dropout: probability has to be between 0 and 1, but got ", p);
  }
  Tensor forward(const Tensor& input) { return functional::dropout(input, p, is_training()); }
  double p;
};
LOCKSTEP_MODULE(Dropout);

}  // namespace lockstep::nn
