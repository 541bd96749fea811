// F::scaled_dot_product_attention, as torch.nn.functional's, from matmul, masked_fill, softmax and
// dropout: a PyTorch program that calls it (nanoGPT's default path) ports line for line.
#include <cmath>
#include <limits>

#include "nn/functional.h"
#include "tensor/factory.h"

namespace lockstep::nn::functional {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  LOCKSTEP_CHECK(q.defined() && k.defined() && v.defined(), op, ": got an undefined tensor");
  LOCKSTEP_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, op, ": expected q, k, v with at least 2 dimensions, got ",
                 q.shape(), ", ", k.shape(), ", ", v.shape());
  const int64_t L = q.size(-2), E = q.size(-1), S = k.size(-2);
  LOCKSTEP_CHECK(k.size(-1) == E && v.size(-2) == S, op, ": q ", q.shape(), ", k ", k.shape(), " and v ", v.shape(),
                 " do not fit (expected q [..., L, E], k [..., S, E], v [..., S, Ev])");
  LOCKSTEP_CHECK(!(is_causal && attn_mask.defined()), op, ": give attn_mask or is_causal, not both");
  LOCKSTEP_CHECK(dropout_p >= 0 && dropout_p <= 1, op, ": dropout_p must be in [0, 1], got ", dropout_p);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(E)));
  Tensor att = matmul(q, k.transpose(-2, -1)) * s;  // [..., L, S]
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (is_causal) {
    const Tensor allowed = tril(ones({L, S}, TensorOptions(kBool, q.device())));
    att = att.masked_fill(logical_not(allowed), -kInf);
  } else if (attn_mask.defined()) {
    att = attn_mask.dtype() == kBool ? att.masked_fill(logical_not(attn_mask), -kInf) : att + attn_mask;
  }
  att = lockstep::softmax(att, -1);
  if (dropout_p > 0) att = lockstep::dropout(att, dropout_p, true);
  return matmul(att, v);
}

}  // namespace lockstep::nn::functional
