// Matrix products in the ops layer: torch.matmul's rank rules, batch broadcasting, and strided operands
// handed to the GEMM as transposes and leading dimensions instead of copies.
#include <algorithm>
#include <optional>

#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

// How the GEMM reads a matrix [rows, cols] with strides (s0, s1): row-major with leading dimension
// `ld`, or (trans) as the transpose of a row-major [cols, rows] matrix. nullopt: no BLAS layout fits.
struct MatLayout {
  bool trans;
  int64_t ld;
};
std::optional<MatLayout> mat_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= std::max<int64_t>(cols, 1)))
    return MatLayout{false, rows == 1 ? std::max<int64_t>(cols, 1) : s0};
  if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= std::max<int64_t>(rows, 1)))
    return MatLayout{true, cols == 1 ? std::max<int64_t>(rows, 1) : s1};
  return std::nullopt;
}

// The single stride that walks x's leading `nb` (batch) dimensions in row-major order, or nullopt.
std::optional<int64_t> batch_stride(const Tensor& x, int64_t nb) {
  std::optional<int64_t> stride;
  int64_t inner_extent = 0;  // stride * size of the dimension to the right
  for (int64_t d = nb - 1; d >= 0; --d) {
    const int64_t size = x.shape()[d], st = x.strides()[d];
    if (size == 1) continue;
    if (!stride) {
      stride = st;
    } else if (st != inner_extent) {
      return std::nullopt;
    }
    inner_extent = st * size;
  }
  return stride.value_or(0);
}

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  check_same_device(a, b, op);
  LOCKSTEP_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", a.dtype(), " and ", b.dtype(),
                 " (convert one with .to(dtype))");
  LOCKSTEP_CHECK(is_floating_point(a.dtype()), op, ": expected floating-point tensors, got ", a.dtype());
}

// out [batch..., m, n] (contiguous) = alpha * op(a) @ op(b) + beta * out, where a and b have the same
// batch shape as out (strides 0 where broadcast) and op transposes their last two dimensions when
// the flag is set. Operands no GEMM layout fits are made contiguous first.
void batched_gemm(Tensor& out, Tensor a, bool ta, Tensor b, bool tb, double alpha, double beta,
                  const Tensor* bias = nullptr) {
  const int64_t nb = out.dim() - 2;
  // Matrices the GEMM can read in place, whose batch dimensions no single stride walks (the heads
  // of attention's q, k and v: [B, H, T, hs] views of [B, T, 3C], strides 3TC and hs): one batched
  // product per index of the first batch dimension instead of copying the operand.
  auto fits = [&](const Tensor& x) {
    return mat_layout(x.shape()[nb], x.shape()[nb + 1], x.strides()[nb], x.strides()[nb + 1]).has_value();
  };
  if (nb >= 2 && fits(a) && fits(b) && (!batch_stride(a, nb) || !batch_stride(b, nb))) {
    for (int64_t i = 0; i < out.shape()[0]; ++i) {
      Tensor oi = select(out, 0, i);
      batched_gemm(oi, select(a, 0, i), ta, select(b, 0, i), tb, alpha, beta, bias);
    }
    return;
  }
  auto layout = [&](Tensor& x) {
    const int64_t r = x.shape()[nb], c = x.shape()[nb + 1];
    auto l = mat_layout(r, c, x.strides()[nb], x.strides()[nb + 1]);
    auto bs = batch_stride(x, nb);
    if (!l || !bs) {
      x = contiguous(x);
      l = mat_layout(r, c, x.strides()[nb], x.strides()[nb + 1]);
      bs = batch_stride(x, nb);
    }
    return std::pair<MatLayout, int64_t>{*l, *bs};
  };
  auto [la, bsa] = layout(a);
  auto [lb, bsb] = layout(b);
  GemmArgs g;
  g.batch = 1;
  for (int64_t d = 0; d < nb; ++d) g.batch *= out.shape()[d];
  g.m = out.shape()[nb];
  g.n = out.shape()[nb + 1];
  g.k = ta ? a.shape()[nb] : a.shape()[nb + 1];
  g.trans_a = ta != la.trans;
  g.trans_b = tb != lb.trans;
  g.lda = la.ld;
  g.ldb = lb.ld;
  g.ldc = std::max<int64_t>(g.n, 1);
  g.batch_stride_a = bsa;
  g.batch_stride_b = bsb;
  g.batch_stride_c = g.m * g.n;
  g.alpha = alpha;
  g.beta = beta;
  g.bias = bias;
  if (out.numel()) backend_for(out.device()).gemm(out, a, b, g);
}

// Operands whose backend's GEMM does not take their dtype (float16 on the CPU): float32, the result
// rounded back.
bool gemm_via_float32(const Tensor& a) {
  return is_reduced_floating_point(a.dtype()) && !supports(a.device(), Capability::kGemm, a.dtype());
}

// The shape of op(a) @ op(b) for 2-D a and b, after checking them.
Shape product_shape_2d(const Tensor& a, bool ta, const Tensor& b, bool tb, const char* op) {
  check_operands(a, b, op);
  LOCKSTEP_CHECK(a.dim() == 2 && b.dim() == 2, op, ": expected 2-D tensors, got ", a.shape(), " x ", b.shape());
  const int64_t k1 = ta ? a.size(0) : a.size(1), k2 = tb ? b.size(1) : b.size(0);
  LOCKSTEP_CHECK(k1 == k2, op, ": ", a.shape(), ta ? "^T" : "", " x ", b.shape(), tb ? "^T" : "",
                 ": inner dimensions differ");
  return {ta ? a.size(1) : a.size(0), tb ? b.size(0) : b.size(1)};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Shape shape = product_shape_2d(a, ta, b, tb, "matmul");
  if (gemm_via_float32(a))
    return to_dtype(matmul(to_dtype(a, kFloat32), to_dtype(b, kFloat32), ta, tb), a.dtype());
  // bfloat16 operands go to the GEMM as they are on every device: float32 accumulation and a bfloat16
  // result (tensor/cpu/gemm.h's kernel on the CPU, cublasGemmEx on CUDA).
  Tensor out(shape, a.dtype(), a.device());
  batched_gemm(out, a, ta, b, tb, 1.0, 0.0);
  return out;
}

void gemm_(Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, double alpha, double beta,
           const Tensor& bias) {
  const Shape want = product_shape_2d(a, ta, b, tb, "gemm_");
  LOCKSTEP_CHECK(out.defined() && out.shape() == want && out.dtype() == a.dtype() && out.device() == a.device() &&
                     out.is_contiguous(),
                 "gemm_: output ", out.defined() ? out.shape() : Shape{}, " does not match the product ", want, " ",
                 a.dtype(), " on ", a.device(), " (or is not contiguous)");
  LOCKSTEP_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == want[1] && bias.dtype() == out.dtype() &&
                                     bias.device() == out.device()),
                 "gemm_: bias ", bias.shape(), " ", bias.dtype(), " on ", bias.device(), " does not match the product ",
                 want, " ", out.dtype(), " on ", out.device(), " (expected [", want[1], "] of that dtype and device)");
  if (gemm_via_float32(a)) {  // as matmul: float32 copies, the sum rounded once into out
    Tensor out32 = beta == 0 ? Tensor(out.shape(), kFloat32, out.device()) : to_dtype(out, kFloat32);
    gemm_(out32, to_dtype(a, kFloat32), ta, to_dtype(b, kFloat32), tb, alpha, beta,
          bias.defined() ? to_dtype(bias, kFloat32) : bias);
    return copy_(out, out32);
  }
  // bfloat16 on every device: float32 accumulation, and beta * out added in float32 before the one
  // rounding (tensor/cpu/gemm.h on the CPU).
  if (!bias.defined()) return batched_gemm(out, a, ta, b, tb, alpha, beta);
  const Tensor b1 = contiguous(bias);
  batched_gemm(out, a, ta, b, tb, alpha, beta, &b1);
}

// torch.matmul's rules: a 1-D operand gains a dimension of 1 (removed from the result), the last two
// dimensions multiply, and the leading (batch) dimensions broadcast.
Tensor matmul(const Tensor& a0, const Tensor& b0) {
  check_operands(a0, b0, "matmul");
  LOCKSTEP_CHECK(a0.dim() >= 1 && b0.dim() >= 1, "matmul: both operands need at least one dimension, got ",
                 a0.shape(), " and ", b0.shape());
  if (gemm_via_float32(a0)) return to_dtype(matmul(to_dtype(a0, kFloat32), to_dtype(b0, kFloat32)), a0.dtype());
  Tensor a = a0.dim() == 1 ? unsqueeze(a0, 0) : a0;
  Tensor b = b0.dim() == 1 ? unsqueeze(b0, 1) : b0;
  const int64_t m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1];
  const int64_t k2 = b.shape()[b.dim() - 2], n = b.shape()[b.dim() - 1];
  LOCKSTEP_CHECK(k == k2, "matmul: ", a0.shape(), " x ", b0.shape(), ": inner dimensions differ");
  Shape batch;
  try {
    batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                             Shape(b.shape().begin(), b.shape().end() - 2), "matmul");
  } catch (const Error&) {
    fail("matmul: ", a0.shape(), " x ", b0.shape(), ": the batch dimensions cannot be broadcast");
  }
  Tensor out;
  if (b.dim() == 2 && a.dim() > 2) {
    // [..., m, k] @ [k, n]: the batch folds into the rows, one GEMM (a view when a's layout allows).
    Tensor a2 = reshape(a, {-1, k});
    Tensor o2({a2.size(0), n}, a.dtype(), a.device());
    batched_gemm(o2, a2, false, b, false, 1.0, 0.0);
    Shape s = batch;
    s.push_back(m);
    s.push_back(n);
    out = view(o2, s);
  } else {
    Shape sa = batch, sb = batch, so = batch;
    sa.insert(sa.end(), {m, k});
    sb.insert(sb.end(), {k, n});
    so.insert(so.end(), {m, n});
    out = Tensor(so, a.dtype(), a.device());
    batched_gemm(out, expand(a, sa), false, expand(b, sb), false, 1.0, 0.0);
  }
  if (a0.dim() == 1) out = squeeze(out, -2);
  if (b0.dim() == 1) out = squeeze(out, -1);
  return out;
}

}  // namespace lockstep::internal
