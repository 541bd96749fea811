// F::ctc_loss: the per-sample likelihoods from the ops layer's recursions (tensor/ctc_loss.cpp), recorded
// as one node whose backward runs the beta recursion, then reduced with tensor ops.
#include "nn/ctc_loss.h"

#include "autograd/functions.h"
#include "autograd/node.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn::functional {

namespace {

// Lengths as host integers: an int64 tensor of N (or one, unbatched) values.
std::vector<int64_t> lengths_of(const Tensor& t, int64_t n, const char* what) {
  LOCKSTEP_CHECK(t.defined() && t.dtype() == kInt64 && t.numel() == n, "ctc_loss: ", what, " must be of size "
                 "batch_size (", n, ") and int64, got ", t.defined() ? dtype_name(t.dtype()) : "undefined", " ",
                 t.defined() ? t.shape() : Shape{});
  return internal::to_device(internal::contiguous(t), Device::cpu()).to_vector<int64_t>();
}

}  // namespace

Tensor ctc_loss(const Tensor& log_probs_in, const Tensor& targets_in, const Tensor& input_lengths,
                const Tensor& target_lengths, const CTCLossFuncOptions& o) {
  LOCKSTEP_CHECK(log_probs_in.defined() && targets_in.defined(), "ctc_loss: got an undefined tensor");
  const bool unbatched = log_probs_in.dim() == 2;
  const Tensor log_probs = unbatched ? log_probs_in.unsqueeze(1) : log_probs_in;
  const Tensor targets = unbatched && targets_in.dim() == 1 ? targets_in.unsqueeze(0) : targets_in;
  LOCKSTEP_CHECK(log_probs.dim() == 3, "ctc_loss: expected log_probs [T, N, C] or [T, C], got ", log_probs_in.shape());
  const int64_t N = log_probs.size(1);
  const std::vector<int64_t> in_len = lengths_of(input_lengths, N, "input_lengths");
  const std::vector<int64_t> tgt_len = lengths_of(target_lengths, N, "target_lengths");
  const int64_t blank = o.blank();
  const bool zero_inf = o.zero_infinity();
  const internal::CtcResult fwd = internal::ctc_loss(log_probs.detach(), targets, in_len, tgt_len, blank);
  Tensor nll = fwd.nll;
  if (autograd::needs_grad({log_probs})) {
    nll = autograd::record("ctc_loss", nll, {log_probs}, [fwd, zero_inf](const Tensor& g) {
      return std::vector<Tensor>{internal::ctc_loss_backward(g, fwd, zero_inf)};
    });
  }
  if (zero_inf) nll = where(isinf(nll), zeros_like(nll), nll);
  switch (o.reduction()) {
    case Reduction::None: return unbatched ? nll.squeeze(0) : nll;
    case Reduction::Sum: return sum(nll);
    case Reduction::Mean: {
      Tensor len = clamp_min(target_lengths.reshape({N}).to(nll.dtype()).to(nll.device()), 1.0);
      return mean(nll / len);
    }
  }
  return nll;
}

}  // namespace lockstep::nn::functional
