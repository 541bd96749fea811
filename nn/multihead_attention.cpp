// MultiheadAttention and F::multi_head_attention_forward (the module's forward over its parameters),
// computed in the batch-first layout
// whatever the module's, with the heads as a dimension of their own ([N, H, L, head_dim]) rather than
// folded into the batch, so both paths (the explicit softmax that returns the weights and
// F::scaled_dot_product_attention) take one additive mask broadcast to [N, H, L, S].
#include "nn/multihead_attention.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/factory.h"

namespace lockstep::nn {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A mask as scores to add, as PyTorch's _canonical_mask: bool (true: not allowed) -> 0 or -inf.
Tensor additive(const Tensor& mask, const Tensor& like, const std::string& op, const char* what) {
  LOCKSTEP_CHECK(mask.dtype() == kBool || is_floating_point(mask.dtype()), op, ": ", what,
                 " must be bool or floating point, got ", mask.dtype());
  LOCKSTEP_CHECK(mask.device() == like.device(), op, ": ", what, " is on ", mask.device(), " but query on ",
                 like.device());
  if (mask.dtype() != kBool) return mask.to(like.dtype());
  return zeros(mask.shape(), {like.dtype(), like.device()}).masked_fill(mask, -kInf);
}

// Appends `n` zero columns to an additive mask (for the keys bias_k and add_zero_attn append).
Tensor pad_keys(const Tensor& mask, int64_t n) {
  if (!mask.defined() || n == 0) return mask;
  Shape s = mask.shape();
  s.back() = n;
  return cat({mask, zeros(s, {mask.dtype(), mask.device()})}, -1);
}

}  // namespace

MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& o)
    : Module("MultiheadAttention"),
      options(o),
      embed_dim(o.embed_dim()),
      kdim(o.kdim()),
      vdim(o.vdim()),
      num_heads(o.num_heads()),
      head_dim(0) {
  LOCKSTEP_CHECK(embed_dim > 0 && num_heads > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ",
                 embed_dim, " and ", num_heads);
  LOCKSTEP_CHECK(embed_dim % num_heads == 0, "MultiheadAttention: embed_dim ", embed_dim,
                 " must be divisible by num_heads ", num_heads);
  LOCKSTEP_CHECK(kdim > 0 && vdim > 0, "MultiheadAttention: kdim and vdim must be positive, got ", kdim, " and ", vdim);
  LOCKSTEP_CHECK(o.dropout() >= 0 && o.dropout() <= 1, "MultiheadAttention: dropout must be in [0, 1], got ",
                 o.dropout());
  head_dim = embed_dim / num_heads;
  std::ostringstream label;
  label << "MultiheadAttention(embed_dim=" << embed_dim << ", num_heads=" << num_heads << ")";
  label_ = label.str();
  // PyTorch's registration order, so parameters() and state_dict() list them as its do.
  if (kdim == embed_dim && vdim == embed_dim) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({embed_dim, embed_dim}));
    k_proj_weight = register_parameter("k_proj_weight", empty({embed_dim, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({embed_dim, vdim}));
  }
  if (o.bias()) in_proj_bias = register_parameter("in_proj_bias", empty({3 * embed_dim}));
  if (o.add_bias_kv()) {
    bias_k = register_parameter("bias_k", empty({1, 1, embed_dim}));
    bias_v = register_parameter("bias_v", empty({1, 1, embed_dim}));
  }
  out_proj = register_module("out_proj", Linear(LinearOptions(embed_dim, embed_dim).bias(o.bias())));
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  for (Tensor* w : {&in_proj_weight, &q_proj_weight, &k_proj_weight, &v_proj_weight})
    if (w->defined()) init::xavier_uniform_(*w);
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
  if (bias_k.defined()) {
    init::xavier_normal_(bias_k);
    init::xavier_normal_(bias_v);
  }
}

namespace {

// The forward of both: `op` names the caller in messages, batch_first the layout of query, key and value.
std::tuple<Tensor, Tensor> attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                  const functional::MultiheadAttentionForwardFuncOptions& o, const std::string& op,
                                  bool batch_first) {
  const Tensor &key_padding_mask = o.key_padding_mask(), &attn_mask = o.attn_mask();
  const bool need_weights = o.need_weights(), is_causal = o.is_causal();
  const int64_t H = o.num_heads(), E = o.embed_dim_to_check();
  LOCKSTEP_CHECK(H > 0 && E > 0 && E % H == 0, op, ": embed_dim ", E, " must be divisible by num_heads ", H);
  const int64_t head_dim = E / H;
  const bool separate = o.use_separate_proj_weight();
  const Tensor& in_proj_weight = o.in_proj_weight();
  LOCKSTEP_CHECK(separate ? o.q_proj_weight().defined() && o.k_proj_weight().defined() && o.v_proj_weight().defined()
                          : in_proj_weight.defined(),
                 op, separate ? ": use_separate_proj_weight needs q_proj_weight, k_proj_weight and v_proj_weight"
                              : ": in_proj_weight is undefined (or set use_separate_proj_weight)");
  LOCKSTEP_CHECK(o.out_proj_weight().defined(), op, ": out_proj_weight is undefined");
  const int64_t kdim = separate ? o.k_proj_weight().size(-1) : E, vdim = separate ? o.v_proj_weight().size(-1) : E;
  LOCKSTEP_CHECK(query.defined() && key.defined() && value.defined(), op, ": query, key and value must be defined");
  const bool batched = query.dim() == 3;
  const char* layout = !batched ? "[L, E], [S, kdim], [S, vdim] (unbatched)"
                       : batch_first ? "[N, L, E], [N, S, kdim], [N, S, vdim] (batch_first)"
                                               : "[L, N, E], [S, N, kdim], [S, N, vdim]";
  LOCKSTEP_CHECK((query.dim() == 2 || query.dim() == 3) && key.dim() == query.dim() && value.dim() == query.dim(), op,
                 ": expected query, key, value ", layout, ", got ", query.shape(), ", ", key.shape(), ", ",
                 value.shape());
  // Everything below runs batch first: [N, L, E].
  auto to_batch_first = [&](const Tensor& t) {
    return !batched ? t.unsqueeze(0) : batch_first ? t : t.transpose(0, 1);
  };
  Tensor q = to_batch_first(query), k = to_batch_first(key), v = to_batch_first(value);
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1);
  LOCKSTEP_CHECK(q.size(2) == E && k.size(2) == kdim && v.size(2) == vdim && k.size(0) == N && v.size(0) == N &&
                     v.size(1) == S,
                 op, ": query ", query.shape(), ", key ", key.shape(), " and value ", value.shape(),
                 " do not fit: expected ", layout, " with E = ", E, ", kdim = ", kdim, ", vdim = ", vdim);
  const Tensor& w0 = o.out_proj_weight();
  for (const Tensor* t : {&query, &key, &value}) {
    LOCKSTEP_CHECK(t->dtype() == w0.dtype(), op, ": query, key and value must be ", w0.dtype(),
                   " as the module's parameters, got ", query.dtype(), ", ", key.dtype(), ", ", value.dtype());
    LOCKSTEP_CHECK(t->device() == w0.device(), op, ": query, key and value must be on ", w0.device(),
                   " as the module's parameters, got ", query.device(), ", ", key.device(), ", ", value.device());
  }

  // The masks, as one additive mask broadcast to [N, H, L, S].
  Tensor mask;
  if (attn_mask.defined()) {
    const bool fits2 = attn_mask.shape() == Shape{L, S}, fits3 = attn_mask.shape() == Shape{N * H, L, S};
    LOCKSTEP_CHECK(fits2 || fits3, op, ": attn_mask ", attn_mask.shape(), " does not fit query ", query.shape(),
                   " and key ", key.shape(), ": expected [L, S] = ", Shape{L, S}, " or [N * num_heads, L, S] = ",
                   Shape{N * H, L, S});
    mask = additive(attn_mask, q, op, "attn_mask");
    if (fits3) mask = mask.reshape({N, H, L, S});
  }
  // is_causal is a hint that attn_mask is the causal mask, as in PyTorch, which raises without the mask
  // (its eval-mode fast path aside): scaled_dot_product_attention may then take the hint alone.
  LOCKSTEP_CHECK(!is_causal || attn_mask.defined(), op,
                 ": is_causal is a hint that attn_mask is the causal mask and needs attn_mask, as PyTorch's; pass "
                 "nn::generate_square_subsequent_mask(", L, ") as attn_mask");
  const bool sdpa_causal = is_causal && !need_weights && !key_padding_mask.defined();
  if (sdpa_causal) mask = Tensor();
  if (key_padding_mask.defined()) {
    const Shape want = batched ? Shape{N, S} : Shape{S};
    LOCKSTEP_CHECK(key_padding_mask.shape() == want, op, ": key_padding_mask ", key_padding_mask.shape(),
                   " does not fit key ", key.shape(), ": expected ", batched ? "[N, S] = " : "[S] = ", want);
    Tensor pad = additive(key_padding_mask, q, op, "key_padding_mask").reshape({N, 1, 1, S});
    mask = mask.defined() ? mask + pad : pad;
  }

  // The input projections: one product for self-attention, else one per input.
  Tensor qp, kp, vp;  // [N, L, E], [N, S, E], [N, S, E]
  const Tensor& in_proj_bias = o.in_proj_bias();
  std::vector<Tensor> b = in_proj_bias.defined() ? in_proj_bias.chunk(3) : std::vector<Tensor>(3);
  if (!separate && query.is_same(key) && key.is_same(value)) {
    std::vector<Tensor> qkv = linear(q, in_proj_weight, in_proj_bias).chunk(3, -1);
    qp = qkv[0], kp = qkv[1], vp = qkv[2];
  } else {
    std::vector<Tensor> w = !separate ? in_proj_weight.chunk(3)
                                      : std::vector<Tensor>{o.q_proj_weight(), o.k_proj_weight(), o.v_proj_weight()};
    qp = linear(q, w[0], b[0]);
    // static_k / static_v replace the projected keys / values (below), as PyTorch's.
    kp = o.static_k().defined() ? Tensor() : linear(k, w[1], b[1]);
    vp = o.static_v().defined() ? Tensor() : linear(v, w[2], b[2]);
  }
  LOCKSTEP_CHECK(o.bias_k().defined() == o.bias_v().defined(), op, ": bias_k and bias_v must be given together");
  if (o.bias_k().defined()) {
    LOCKSTEP_CHECK(!o.static_k().defined() && !o.static_v().defined(), op,
                   ": bias cannot be added to static key or value");
    kp = cat({kp, o.bias_k().expand({N, 1, E})}, 1);
    vp = cat({vp, o.bias_v().expand({N, 1, E})}, 1);
  }
  auto heads = [&](const Tensor& t) { return t.reshape({N, t.size(1), H, head_dim}).transpose(1, 2); };
  // static_k [N * H, S', head_dim] -> [N, H, S', head_dim]
  auto static_heads = [&](const Tensor& t, const char* what) {
    LOCKSTEP_CHECK(t.dim() == 3 && t.size(0) == N * H && t.size(2) == head_dim, op, ": ", what, " ", t.shape(),
                   " must be [N * num_heads, S, head_dim] = [", N * H, ", S, ", head_dim, "]");
    return t.reshape({N, H, t.size(1), head_dim});
  };
  Tensor qh = heads(qp);  // [N, H, L, head_dim]
  Tensor kh = o.static_k().defined() ? static_heads(o.static_k(), "static_k") : heads(kp);  // [N, H, S', head_dim]
  Tensor vh = o.static_v().defined() ? static_heads(o.static_v(), "static_v") : heads(vp);
  LOCKSTEP_CHECK(kh.size(2) == vh.size(2), op, ": keys (", kh.size(2), ") and values (", vh.size(2),
                 ") differ in length");
  if (o.add_zero_attn()) {
    kh = cat({kh, zeros({N, H, 1, head_dim}, {kh.dtype(), kh.device()})}, 2);
    vh = cat({vh, zeros({N, H, 1, head_dim}, {vh.dtype(), vh.device()})}, 2);
  }
  LOCKSTEP_CHECK(kh.size(2) >= S || !mask.defined(), op, ": static_k holds ", kh.size(2), " keys, fewer than the ",
                 S, " the masks cover");
  mask = pad_keys(mask, kh.size(2) - S);

  const double p = o.training() ? o.dropout_p() : 0.0;
  Tensor out, weights;  // out [N, H, L, head_dim]
  if (need_weights) {
    Tensor att = matmul(qh * (1.0 / std::sqrt(static_cast<double>(head_dim))), kh.transpose(-2, -1));
    if (mask.defined()) att = att + mask;
    att = softmax(att, -1);
    if (p > 0) att = dropout(att, p, true);
    out = matmul(att, vh);
    weights = o.average_attn_weights() ? att.mean(1) : att;  // [N, L, S'] or [N, H, L, S']
    if (!batched) weights = weights.squeeze(0);
  } else {
    out = functional::scaled_dot_product_attention(qh, kh, vh, mask, p, sdpa_causal);
  }
  out = linear(out.transpose(1, 2).reshape({N, L, E}), w0, o.out_proj_bias());
  out = !batched ? out.squeeze(0) : batch_first ? out : out.transpose(0, 1);
  return {out, weights};
}

}  // namespace

std::tuple<Tensor, Tensor> functional::multi_head_attention_forward(const Tensor& query, const Tensor& key,
                                                                    const Tensor& value,
                                                                    const MultiheadAttentionForwardFuncOptions& options) {
  return attend(query, key, value, options, "multi_head_attention_forward", /*batch_first=*/false);
}

std::tuple<Tensor, Tensor> MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                           const Tensor& key_padding_mask, bool need_weights,
                                                           const Tensor& attn_mask, bool average_attn_weights,
                                                           bool is_causal) {
  auto o = functional::MultiheadAttentionForwardFuncOptions(embed_dim, num_heads, in_proj_weight, in_proj_bias, bias_k,
                                                            bias_v, options.add_zero_attn(), options.dropout(),
                                                            out_proj->weight, out_proj->bias)
               .training(is_training())
               .key_padding_mask(key_padding_mask)
               .need_weights(need_weights)
               .attn_mask(attn_mask)
               .use_separate_proj_weight(!in_proj_weight.defined())
               .q_proj_weight(q_proj_weight)
               .k_proj_weight(k_proj_weight)
               .v_proj_weight(v_proj_weight)
               .average_attn_weights(average_attn_weights)
               .is_causal(is_causal);
  return attend(query, key, value, o, label_, options.batch_first());
}

}  // namespace lockstep::nn
