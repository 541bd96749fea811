// Fused attention in the ops layer (tensor/attention.h): operand layouts for the kernels, outputs
// allocated heads-inner, the mask broadcast by strides, and the composed path's dropout mask.
#include "tensor/attention.h"

#include <vector>

#include "tensor/backend.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {
namespace {

// t itself unless its last dimension is strided (the kernels read rows with stride 1).
Tensor rows_unit_stride(const Tensor& t) { return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : contiguous(t); }

AttentionArgs::Layout layout(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// [B, H, R, C] of dtype on device, stored as [B, R, H, C].
Tensor heads_inner(int64_t B, int64_t H, int64_t R, int64_t C, Dtype dtype, Device device) {
  return permute(Tensor(Shape{B, R, H, C}, dtype, device), {0, 2, 1, 3});
}

AttentionArgs make_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        const AttentionParams& p) {
  LOCKSTEP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: expected 4-D q, k, v, got ", q.shape(),
                 ", ", k.shape(), ", ", v.shape());
  AttentionArgs a;
  a.B = q.size(0), a.Hq = q.size(1), a.L = q.size(2), a.E = q.size(3);
  a.Hkv = k.size(1), a.S = k.size(2), a.Ev = v.size(3);
  LOCKSTEP_CHECK(k.size(0) == a.B && v.size(0) == a.B && v.size(1) == a.Hkv && a.Hkv > 0 && a.Hq % a.Hkv == 0 &&
                     k.size(3) == a.E && v.size(2) == a.S,
                 "attention: q ", q.shape(), ", k ", k.shape(), " and v ", v.shape(), " do not fit");
  LOCKSTEP_CHECK(is_floating_point(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
                 "attention: expected q, k, v of one floating dtype, got ", q.dtype(), ", ", k.dtype(), ", ",
                 v.dtype());
  check_same_device(q, k, "attention");
  check_same_device(q, v, "attention");
  a.q = layout(q), a.k = layout(k), a.v = layout(v);
  if (mask.defined()) {
    check_same_device(q, mask, "attention");
    a.mask_kind = mask.dtype() == kBool ? AttentionMask::Bool : AttentionMask::Additive;
    for (int d = 0; d < 4; ++d) a.mask[d] = mask.size(d) == 1 ? 0 : mask.stride(d);
  }
  a.is_causal = p.is_causal, a.scale = p.scale, a.dropout_p = p.dropout_p, a.seed = p.seed, a.offset = p.offset;
  return a;
}

// The dtype the kernels compute q's dtype in (attention_acc_t): float32 for bfloat16 and float16.
Dtype acc_dtype(Dtype d) { return d == kFloat64 ? kFloat64 : kFloat32; }

// mask as the kernels read it: bool, or acc_dtype (converted before it is broadcast, so an [L, S] mask
// stays [L, S]); broadcast to [B, Hq, L, S] by strides.
Tensor kernel_mask(const Tensor& mask, const Tensor& q, int64_t S) {
  if (!mask.defined()) return mask;
  Tensor m = mask.dtype() == kBool ? mask : to_dtype(mask, acc_dtype(q.dtype()));
  return expand(m, {q.size(0), q.size(1), q.size(2), S});
}

}  // namespace

AttentionResult attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& mask_in,
                                  const AttentionParams& p) {
  Tensor q = rows_unit_stride(q_in), k = rows_unit_stride(k_in), v = rows_unit_stride(v_in);
  Tensor mask = kernel_mask(mask_in, q, k.size(2));
  AttentionArgs a = make_args(q, k, v, mask, p);
  AttentionResult r{heads_inner(a.B, a.Hq, a.L, a.Ev, q.dtype(), q.device()),
                    Tensor(Shape{a.B, a.Hq, a.L}, acc_dtype(q.dtype()), q.device())};
  a.out = layout(r.out);
  backend_for(q.device()).attention_forward(r.out, r.lse, q, k, v, mask, a);
  return r;
}

AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                  const Tensor& mask_in, const AttentionResult& fwd, const AttentionParams& p) {
  LOCKSTEP_CHECK(grad_out.shape() == fwd.out.shape(), "attention_backward: gradient ", grad_out.shape(),
                 " does not match the output ", fwd.out.shape());
  Tensor q = rows_unit_stride(q_in), k = rows_unit_stride(k_in), v = rows_unit_stride(v_in);
  Tensor go = rows_unit_stride(to_dtype(grad_out, q.dtype()));
  Tensor mask = kernel_mask(mask_in, q, k.size(2));
  AttentionArgs a = make_args(q, k, v, mask, p);
  AttentionGrads g{heads_inner(a.B, a.Hq, a.L, a.E, q.dtype(), q.device()),
                   heads_inner(a.B, a.Hkv, a.S, a.E, q.dtype(), q.device()),
                   heads_inner(a.B, a.Hkv, a.S, a.Ev, q.dtype(), q.device())};
  fill_(g.q, 0.0);
  a.out = layout(fwd.out), a.grad_out = layout(go), a.dq = layout(g.q), a.dk = layout(g.k), a.dv = layout(g.v);
  backend_for(q.device()).attention_backward(g.q, g.k, g.v, go, q, k, v, mask, fwd.out, fwd.lse, a);
  return g;
}

Tensor attention_dropout_mask(const Shape& shape, double dropout_p, uint64_t seed, uint64_t offset, Dtype dtype,
                              Device device) {
  Tensor m(shape, kFloat64, Device::cpu());
  double* d = m.data<double>();
  const double keep = 1.0 / (1.0 - dropout_p);
  for (int64_t i = 0, n = m.numel(); i < n; ++i)
    d[i] = detail::attention_keep(seed, offset, static_cast<uint64_t>(i), static_cast<float>(dropout_p)) ? keep : 0.0;
  return to_device(to_dtype(m, dtype), device);
}

}  // namespace lockstep::internal
