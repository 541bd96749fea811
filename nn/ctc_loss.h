// CTCLoss and F::ctc_loss, as torch.nn.CTCLoss: the negative log likelihood of each target sequence
// summed over all its alignments with the input (blank-separated, repeats merged), by the forward-backward
// recursions in log space (tensor/ctc_loss.cpp):
//   nn::CTCLoss ctc(nn::CTCLossOptions().blank(0).zero_infinity(true));
//   Tensor loss = ctc(log_probs.log_softmax(2), targets, input_lengths, target_lengths);
// log_probs [T, N, C] ([T, C] unbatched), targets int64 [N, S] or concatenated [sum(target_lengths)], the
// lengths int64 [N]. A target that no alignment fits (longer than its input) costs inf, or 0 with
// zero_infinity, as PyTorch's. Reduction kMean divides each loss by its target length, then averages.
// The gradient is PyTorch's (exp(log_probs) minus the alignments' occupancy), which equals the true one
// once it passes back through the log_softmax that made log_probs.
#pragma once

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"
#include "tensor/tensor.h"

namespace lockstep::nn {

struct CTCLossOptions {
  LOCKSTEP_ARG(int64_t, blank, 0);
  LOCKSTEP_ARG(Reduction, reduction, Reduction::Mean);
  LOCKSTEP_ARG(bool, zero_infinity, false);
};

namespace functional {
using CTCLossFuncOptions = CTCLossOptions;
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CTCLossFuncOptions& options = {});
}  // namespace functional

class CTCLossImpl : public Module {
 public:
  explicit CTCLossImpl(const CTCLossOptions& options = {}) : Module("CTCLoss"), options(options) {}
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                 const Tensor& target_lengths) {
    return functional::ctc_loss(log_probs, targets, input_lengths, target_lengths, options);
  }
  CTCLossOptions options;
};
LOCKSTEP_MODULE(CTCLoss);

}  // namespace lockstep::nn
