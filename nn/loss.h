// Loss modules, as torch.nn.CrossEntropyLoss, NLLLoss, BCELoss, BCEWithLogitsLoss and MSELoss; options as
// their torch keyword arguments (nn/functional.h), e.g.
//   nn::CrossEntropyLoss loss_fn(nn::CrossEntropyLossOptions().ignore_index(-1).label_smoothing(0.1));
//   Tensor loss = loss_fn(logits, targets);
#pragma once

#include "nn/functional.h"
#include "nn/module.h"
#include "nn/module_holder.h"

namespace lockstep::nn {

#define LOCKSTEP_LOSS(Name, fn)                                                                  \
  class Name##Impl : public Module {                                                             \
   public:                                                                                       \
    explicit Name##Impl(const Name##Options& options = {}) : Module(#Name), options(options) {}  \
    Tensor forward(const Tensor& input, const Tensor& target) {                                  \
      return functional::fn(input, target, options);                                             \
    }                                                                                            \
    Name##Options options;                                                                       \
  };                                                                                             \
  LOCKSTEP_MODULE(Name)

LOCKSTEP_LOSS(CrossEntropyLoss, cross_entropy);
LOCKSTEP_LOSS(NLLLoss, nll_loss);
LOCKSTEP_LOSS(BCELoss, binary_cross_entropy);
LOCKSTEP_LOSS(BCEWithLogitsLoss, binary_cross_entropy_with_logits);
LOCKSTEP_LOSS(MSELoss, mse_loss);

#undef LOCKSTEP_LOSS

}  // namespace lockstep::nn
