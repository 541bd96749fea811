// F::scaled_dot_product_attention, as torch.nn.functional's. Where the kernels apply (3-D or 4-D
// q, k, v of any floating dtype with one batch, a mask that needs no gradient) it is one autograd node
// over the fused FlashAttention-2 kernels of tensor/attention.h: no [L, S] weights are stored, and
// backward recomputes them tile by tile. Everything else, and the reference the fused path is tested
// against, is the composed path: matmul, mask, softmax, dropout, matmul (nanoGPT's manual path).
#include <cmath>
#include <limits>

#include "autograd/autocast.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "tensor/backend.h"
#include "tensor/attention.h"
#include "tensor/factory.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace lockstep::nn::functional {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

struct Checked {
  int64_t L, S, E, Ev;
  double scale;
};

// The user's operands against torch's rules, naming them.
Checked check(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask, double dropout_p,
              bool is_causal, std::optional<double> scale, bool enable_gqa) {
  LOCKSTEP_CHECK(q.defined() && k.defined() && v.defined(), kOp, ": got an undefined tensor");
  LOCKSTEP_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, kOp,
                 ": expected q, k, v with at least 2 dimensions, got ", q.shape(), ", ", k.shape(), ", ", v.shape());
  const int64_t L = q.size(-2), E = q.size(-1), S = k.size(-2), Ev = v.size(-1);
  LOCKSTEP_CHECK(k.size(-1) == E && v.size(-2) == S, kOp, ": q ", q.shape(), ", k ", k.shape(), " and v ", v.shape(),
                 " do not fit (expected q [..., L, E], k [..., S, E], v [..., S, Ev])");
  LOCKSTEP_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && is_floating_point(q.dtype()), kOp,
                 ": expected q, k, v of one floating dtype, got ", q.dtype(), ", ", k.dtype(), ", ", v.dtype());
  LOCKSTEP_CHECK(q.device() == k.device() && q.device() == v.device(), kOp, ": q, k, v must be on one device, got ",
                 q.device(), ", ", k.device(), ", ", v.device());
  LOCKSTEP_CHECK(k.dim() == v.dim() && (k.dim() < 3 || k.size(-3) == v.size(-3)), kOp, ": k ", k.shape(), " and v ",
                 v.shape(), " must have the same heads");
  if (enable_gqa && q.dim() >= 3 && k.dim() >= 3) {
    const int64_t Hq = q.size(-3), Hkv = k.size(-3);
    LOCKSTEP_CHECK(Hkv > 0 && Hq % Hkv == 0, kOp, ": enable_gqa needs q's heads (", Hq, ", q ", q.shape(),
                   ") to be a multiple of k's and v's (", Hkv, ", k ", k.shape(), ")");
  }
  LOCKSTEP_CHECK(!(is_causal && attn_mask.defined()), kOp, ": give attn_mask or is_causal, not both");
  LOCKSTEP_CHECK(dropout_p >= 0 && dropout_p <= 1, kOp, ": dropout_p must be in [0, 1], got ", dropout_p);
  if (attn_mask.defined()) {
    LOCKSTEP_CHECK(attn_mask.dtype() == kBool || attn_mask.dtype() == q.dtype(), kOp,
                   ": attn_mask must be bool or of q's dtype ", q.dtype(), ", got ", attn_mask.dtype());
    LOCKSTEP_CHECK(attn_mask.device() == q.device(), kOp, ": attn_mask is on ", attn_mask.device(), ", q on ",
                   q.device());
    Shape target = q.shape();
    target.back() = S;  // [..., L, S]
    bool fits = attn_mask.dim() <= static_cast<int64_t>(target.size());
    for (int64_t d = 1; fits && d <= attn_mask.dim(); ++d) {
      const int64_t m = attn_mask.size(-d), t = target[target.size() - d];
      fits = m == t || m == 1;
    }
    LOCKSTEP_CHECK(fits, kOp, ": attn_mask ", attn_mask.shape(), " does not broadcast to the attention weights ",
                   target, " of q ", q.shape(), " and k ", k.shape());
  }
  if (scale) LOCKSTEP_CHECK(std::isfinite(*scale), kOp, ": scale must be finite, got ", *scale);
  return {L, S, E, Ev, scale.value_or(1.0 / std::sqrt(static_cast<double>(E)))};
}

// Philox seed and offset for a dropout mask of `n` weights from the default generator (attention_keep).
std::pair<uint64_t, uint64_t> draw_dropout(int64_t n) {
  Generator& g = default_generator();
  return {g.seed(), g.reserve_philox(lockstep::detail::attention_dropout_counters(static_cast<uint64_t>(n)))};
}

// Whether the fused kernels take these operands: one batch and heads dimension each (3-D: one head),
// q's heads a multiple of k's (equal without enable_gqa), and a mask without a gradient (the kernels
// do not produce one). bfloat16 and float16 are read and written as such (computed in float32). Heads
// no wider than the backend's limit (BackendLimits::attention_head_dim: CUDA holds a row in registers).
bool fused_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool enable_gqa) {
  if (!is_floating_point(q.dtype())) return false;
  if (mask.defined() && mask.requires_grad()) return false;
  if (!(q.dim() == k.dim() && q.dim() == v.dim() && (q.dim() == 3 || q.dim() == 4))) return false;
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0)) return false;
  if (q.dim() == 4 && !(q.size(1) == k.size(1) || (enable_gqa && q.size(1) % k.size(1) == 0))) return false;
  const int64_t widest = backend_for(q.device()).limits().attention_head_dim;
  if (widest > 0 && (q.size(-1) > widest || v.size(-1) > widest)) return false;
  return true;
}

Tensor fused(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& mask, double dropout_p,
             bool is_causal, double scale) {
  const bool three_d = q_in.dim() == 3;  // [N, L, E]: one head
  Tensor q = three_d ? unsqueeze(q_in, 1) : q_in, k = three_d ? unsqueeze(k_in, 1) : k_in,
         v = three_d ? unsqueeze(v_in, 1) : v_in;
  internal::AttentionParams p{.scale = scale, .is_causal = is_causal, .dropout_p = dropout_p};
  if (dropout_p > 0) std::tie(p.seed, p.offset) = draw_dropout(q.size(0) * q.size(1) * q.size(2) * k.size(2));
  Tensor qd = q.detach(), kd = k.detach(), vd = v.detach(), md = mask.defined() ? mask.detach() : mask;
  internal::AttentionResult r = internal::attention_forward(qd, kd, vd, md, p);
  Tensor out = r.out;
  if (autograd::needs_grad({q, k, v}))
    out = autograd::record(kOp, out, {q, k, v}, [=](const Tensor& g) {
      internal::AttentionGrads d = internal::attention_backward(g, qd, kd, vd, md, r, p);
      return std::vector<Tensor>{d.q, d.k, d.v};
    });
  return three_d ? squeeze(out, 1) : out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& mask_in,
                                    double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa) {
  // Under autocast: q, k, v (and an additive mask) in the autocast dtype, PyTorch's lower-precision list.
  const auto in =
      autograd::amp::cast_inputs(autograd::amp::AutocastOp::ScaledDotProductAttention, q_in, k_in, v_in, mask_in);
  const Tensor &q = in[0], &k = in[1], &v = in[2], &attn_mask = in[3];
  const Checked c = check(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  if (fused_applies(q, k, v, attn_mask, enable_gqa)) return fused(q, k, v, attn_mask, dropout_p, is_causal, c.scale);
  return detail::scaled_dot_product_attention_math(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace lockstep::nn::functional

namespace lockstep::nn::detail {
using namespace functional;

Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k_in, const Tensor& v_in,
                                         const Tensor& attn_mask, double dropout_p, bool is_causal,
                                         std::optional<double> scale, bool enable_gqa) {
  const Checked c = check(q, k_in, v_in, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  Tensor k = k_in, v = v_in;
  if (enable_gqa && q.dim() >= 3 && k.dim() >= 3 && q.size(-3) != k.size(-3)) {
    // Each key/value head serves Hq / Hkv consecutive query heads (torch's repeat_interleave).
    auto repeat = [&](const Tensor& t) {
      Shape grouped = t.shape(), joined = t.shape();
      grouped.insert(grouped.end() - 2, q.size(-3) / t.size(-3));
      joined[joined.size() - 3] = q.size(-3);
      return reshape(expand(unsqueeze(t, t.dim() - 2), grouped), joined);
    };
    k = repeat(k);
    v = repeat(v);
  }
  Tensor att = matmul(q, k.transpose(-2, -1)) * c.scale;  // [..., L, S]
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (is_causal) {
    const Tensor allowed = tril(ones({c.L, c.S}, TensorOptions(kBool, q.device())));
    att = att.masked_fill(logical_not(allowed), -kInf);
  } else if (attn_mask.defined()) {
    att = attn_mask.dtype() == kBool ? att.masked_fill(logical_not(attn_mask), -kInf) : att + attn_mask;
  }
  att = lockstep::softmax(att, -1);
  if (dropout_p > 0) {  // the fused kernels' mask (attention_keep), drawn as they draw it
    auto [seed, offset] = draw_dropout(att.numel());
    att = att * internal::attention_dropout_mask(att.shape(), dropout_p, seed, offset, att.dtype(), att.device());
  }
  return matmul(att, v);
}

}  // namespace lockstep::nn::detail
