// CTC loss in log space on the host (PyTorch's LossCTC.cpp recursions), float64 throughout: per sample,
// the extended target l' = (blank, l1, blank, l2, ..., blank) of 2 S + 1 states; alpha_t(s) sums the
// paths that reach state s at time t, beta_t(s) those from it to the end, both including the emission at
// t. Samples split across threads. Tensors on another device are copied here and the gradient back; the
// host copies are made and checked once, by the forward, and kept for the backward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "tensor/factory.h"
#include "tensor/ops.h"
#include "tensor/parallel.h"

namespace lockstep::internal {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double lse(double a, double b) {
  const double m = std::max(a, b);
  return m == kNegInf ? kNegInf : m + std::log(std::exp(a - m) + std::exp(b - m));
}

}  // namespace

// What the recursions read, checked and on the host in float64, and where the gradient goes.
struct CtcProblem {
  int64_t T, N, C, S_max, blank;
  std::vector<double> lp;            // [T, N, C]
  std::vector<int64_t> targets;      // as given
  std::vector<int64_t> target_start; // sample n's first target in `targets`
  bool concatenated;
  std::vector<int64_t> in_len, tgt_len;
  Dtype dtype;
  Device device;
  double at(int64_t t, int64_t n, int64_t c) const { return lp[(t * N + n) * C + c]; }
  // Sample n's extended-target state s: blank at even s, else its ((s - 1) / 2)-th target.
  int64_t label(int64_t n, int64_t s) const {
    return s % 2 == 0 ? blank : targets[target_start[n] + (s - 1) / 2];
  }
};

namespace {

CtcProblem problem_of(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& in_len,
                   const std::vector<int64_t>& tgt_len, int64_t blank) {
  check_defined(log_probs, "ctc_loss");
  check_defined(targets, "ctc_loss");
  LOCKSTEP_CHECK(log_probs.dim() == 3 && is_floating_point(log_probs.dtype()), "ctc_loss: expected log_probs "
                 "[T, N, C] of a floating dtype, got ", log_probs.dtype(), " ", log_probs.shape());
  const int64_t T = log_probs.size(0), N = log_probs.size(1), C = log_probs.size(2);
  LOCKSTEP_CHECK(blank >= 0 && blank < C, "ctc_loss: blank must be in label range, got ", blank, " for ", C,
                 " classes");
  LOCKSTEP_CHECK(static_cast<int64_t>(in_len.size()) == N, "ctc_loss: input_lengths must be of size batch_size (",
                 N, "), got ", in_len.size());
  LOCKSTEP_CHECK(static_cast<int64_t>(tgt_len.size()) == N, "ctc_loss: target_lengths must be of size batch_size (",
                 N, "), got ", tgt_len.size());
  LOCKSTEP_CHECK(targets.dtype() == kInt64 && (targets.dim() == 1 || targets.dim() == 2), "ctc_loss: expected "
                 "int64 targets [N, S] or concatenated [sum(target_lengths)], got ", targets.dtype(), " ",
                 targets.shape());
  CtcProblem p{T, N, C, 0, blank, {}, {}, {}, targets.dim() == 1, in_len, tgt_len, log_probs.dtype(),
               log_probs.device()};
  int64_t pos = 0;
  for (int64_t n = 0; n < N; ++n) {
    LOCKSTEP_CHECK(in_len[n] >= 0 && in_len[n] <= T, "ctc_loss: Expected input_lengths to have value at most ", T,
                   ", but got value ", in_len[n]);
    LOCKSTEP_CHECK(tgt_len[n] >= 0, "ctc_loss: target_lengths must be non-negative, got ", tgt_len[n]);
    if (p.concatenated) {
      p.target_start.push_back(pos);
      pos += tgt_len[n];
    } else {
      LOCKSTEP_CHECK(targets.size(0) == N, "ctc_loss: targets ", targets.shape(), " for a batch of ", N);
      LOCKSTEP_CHECK(tgt_len[n] <= targets.size(1), "ctc_loss: Expected tensor to have size at least ", tgt_len[n],
                     " at dimension 1, but got size ", targets.size(1), " for argument #2 'targets'");
      p.target_start.push_back(n * targets.size(1));
    }
    p.S_max = std::max(p.S_max, tgt_len[n]);
  }
  LOCKSTEP_CHECK(!p.concatenated || pos <= targets.size(0), "ctc_loss: the target_lengths sum to ", pos,
                 " but the concatenated targets hold ", targets.size(0));
  p.targets = to_device(contiguous(targets), Device::cpu()).to_vector<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < tgt_len[n]; ++i) {
      const int64_t c = p.targets[p.target_start[n] + i];
      LOCKSTEP_CHECK(c >= 0 && c < C, "ctc_loss: target ", c, " of sample ", n, " is out of range for ", C, " classes");
    }
  p.lp = to_dtype(to_device(contiguous(log_probs), Device::cpu()), kFloat64).to_vector<double>();
  return p;
}

}  // namespace

CtcResult ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                   const std::vector<int64_t>& target_lengths, int64_t blank) {
  auto problem = std::make_shared<const CtcProblem>(problem_of(log_probs, targets, input_lengths, target_lengths,
                                                               blank));
  const CtcProblem& p = *problem;
  const int64_t L_max = 2 * p.S_max + 1;
  Tensor alpha = full({p.N, p.T, L_max}, kNegInf, TensorOptions(kFloat64));
  std::vector<double> nll(p.N);
  double* a = alpha.data<double>();
  parallel_for(0, p.N, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n) {
      const int64_t T = p.in_len[n], L = 2 * p.tgt_len[n] + 1;
      double* an = a + n * p.T * L_max;
      if (T == 0) {
        nll[n] = p.tgt_len[n] == 0 ? 0.0 : std::numeric_limits<double>::infinity();
        continue;
      }
      an[0] = p.at(0, n, p.blank);
      if (L > 1) an[1] = p.at(0, n, p.label(n, 1));
      for (int64_t t = 1; t < T; ++t) {
        const double* prev = an + (t - 1) * L_max;
        double* cur = an + t * L_max;
        for (int64_t s = 0; s < L; ++s) {
          const int64_t c = p.label(n, s);
          double v = prev[s];
          if (s > 0) v = lse(v, prev[s - 1]);
          if (s > 1 && c != p.blank && c != p.label(n, s - 2)) v = lse(v, prev[s - 2]);
          cur[s] = v == kNegInf ? kNegInf : v + p.at(t, n, c);
        }
      }
      const double* last = an + (T - 1) * L_max;
      nll[n] = -(L > 1 ? lse(last[L - 1], last[L - 2]) : last[0]);
    }
  });
  Tensor out = to_device(to_dtype(tensor(nll, {p.N}), log_probs.dtype()), log_probs.device());
  return {out, alpha, problem};
}

Tensor ctc_loss_backward(const Tensor& grad_nll, const CtcResult& fwd, bool zero_infinity) {
  LOCKSTEP_CHECK(fwd.problem, "ctc_loss_backward: the forward's result is empty");
  const CtcProblem& p = *fwd.problem;
  LOCKSTEP_CHECK(grad_nll.defined() && grad_nll.numel() == p.N, "ctc_loss_backward: expected a gradient of ", p.N,
                 " values, got ", grad_nll.defined() ? grad_nll.shape() : Shape{});
  const int64_t L_max = 2 * p.S_max + 1;
  const std::vector<double> g = to_dtype(to_device(contiguous(grad_nll), Device::cpu()), kFloat64).to_vector<double>();
  const std::vector<double> nll = to_dtype(to_device(fwd.nll, Device::cpu()), kFloat64).to_vector<double>();
  const double* a = fwd.log_alpha.data<double>();
  std::vector<double> grad(p.T * p.N * p.C, 0.0);
  parallel_for(0, p.N, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> beta, lcab(p.C);
    for (int64_t n = lo; n < hi; ++n) {
      const int64_t T = p.in_len[n], L = 2 * p.tgt_len[n] + 1;
      if (T == 0 || (zero_infinity && std::isinf(nll[n]))) continue;
      beta.assign(T * L, kNegInf);
      double* last = beta.data() + (T - 1) * L;
      last[L - 1] = p.at(T - 1, n, p.label(n, L - 1));
      if (L > 1) last[L - 2] = p.at(T - 1, n, p.label(n, L - 2));
      for (int64_t t = T - 2; t >= 0; --t) {
        const double* next = beta.data() + (t + 1) * L;
        double* cur = beta.data() + t * L;
        for (int64_t s = 0; s < L; ++s) {
          const int64_t c = p.label(n, s);
          double v = next[s];
          if (s < L - 1) v = lse(v, next[s + 1]);
          if (s < L - 2 && c != p.blank && c != p.label(n, s + 2)) v = lse(v, next[s + 2]);
          cur[s] = v == kNegInf ? kNegInf : v + p.at(t, n, c);
        }
      }
      const double* an = a + n * p.T * L_max;
      for (int64_t t = 0; t < T; ++t) {
        std::fill(lcab.begin(), lcab.end(), kNegInf);
        for (int64_t s = 0; s < L; ++s) {
          const int64_t c = p.label(n, s);
          lcab[c] = lse(lcab[c], an[t * L_max + s] + beta[t * L + s]);
        }
        for (int64_t c = 0; c < p.C; ++c) {
          const double lp = p.at(t, n, c);
          grad[(t * p.N + n) * p.C + c] = (std::exp(lp) - std::exp(lcab[c] + nll[n] - lp)) * g[n];
        }
      }
    }
  });
  return to_device(to_dtype(tensor(grad, {p.T, p.N, p.C}), p.dtype), p.device);
}

}  // namespace lockstep::internal
