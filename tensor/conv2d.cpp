// The convolution family's entry points (tensor/conv2d.h): the choice between the backend's direct
// kernels and im2col, and the im2col implementation, on any device and floating dtype.
//
// im2col goes through views, a chunk of images at a time: for each kernel offset, the padded images
// seen through as_strided as [n, C, OH, OW] are copied into columns [C, kh, kw, n, OH, OW], and one
// GEMM per group gives the chunk's output. backward-data is W^T g per chunk and col2im as kh * kw
// strided adds; backward-weight rebuilds each chunk's columns and accumulates g cols^T.
#include "tensor/conv2d.h"

#include <algorithm>

#include "tensor/backend.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

// The sizes one convolution's im2col needs, from the input and weight shapes.
struct Geometry {
  int64_t N, C, H, W, O, kh, kw, OH, OW, Hp, Wp, G, Cg, Og, K, L, chunk;

  Geometry(const Shape& x, const Shape& w, const Conv2dParams& p, Device device)
      : N(x[0]), C(x[1]), H(x[2]), W(x[3]), O(w[0]), kh(w[2]), kw(w[3]) {
    const auto out = p.output_size(H, W, kh, kw);
    OH = out[0], OW = out[1];
    Hp = H + 2 * p.padding[0], Wp = W + 2 * p.padding[1];
    G = p.groups, Cg = C / G, Og = O / G, K = Cg * kh * kw, L = OH * OW;
    // A chunk's columns ([G * K, n * L]) are as many elements as the backend plans for
    // (BackendLimits::im2col_chunk_elements): on the CPU ~1 MiB, which stays in the cache between
    // im2col and the GEMM; on a GPU the whole batch, where launches cost more than memory traffic.
    const int64_t per_image = std::max<int64_t>(C * kh * kw * L, 1);
    const int64_t budget = backend_for(device).limits().im2col_chunk_elements;
    chunk = std::clamp<int64_t>(budget / per_image, 1, std::max<int64_t>(N, 1));
  }
};

// `buf` when it already has this shape, else a new tensor kept in `buf`: the chunk loops allocate
// their work tensors once (and once more for a shorter last chunk), not per chunk.
Tensor& reuse(Tensor& buf, const Shape& shape, const TensorOptions& o) {
  if (!buf.defined() || buf.shape() != shape) buf = empty(shape, o);
  return buf;
}

// Group g's rows of a [G * rows, cols] matrix.
Tensor group(const Tensor& m, int64_t g, int64_t rows) { return narrow(m, 0, g * rows, rows); }

// Kernel offset (i, j) of every window of padded images [n, C, Hp, Wp]: [n, C, OH, OW].
Tensor windows_at(const Tensor& padded, const Geometry& q, const Conv2dParams& p, int64_t i, int64_t j) {
  return as_strided(padded, {padded.size(0), q.C, q.OH, q.OW}, {q.C * q.Hp * q.Wp, q.Hp * q.Wp, p.stride[0] * q.Wp, p.stride[1]},
                    padded.storage_offset() + i * p.dilation[0] * q.Wp + j * p.dilation[1]);
}

// The input zero-padded to [N, C, Hp, Wp] (x itself when unpadded and contiguous).
Tensor pad(const Tensor& x, const Geometry& q, const Conv2dParams& p) {
  if (!p.padding[0] && !p.padding[1] && x.is_contiguous()) return x;
  Tensor xp = zeros({q.N, q.C, q.Hp, q.Wp}, TensorOptions(x.dtype(), x.device()));
  Tensor inner = narrow(narrow(xp, 2, p.padding[0], q.H), 3, p.padding[1], q.W);
  copy_(inner, x);
  return xp;
}

// im2col of images [n0, n0 + n) of the padded batch: kh * kw strided copies into columns
// [C, kh, kw, n, OH, OW] (held in `buf`), returned as [G * K, n * L].
Tensor im2col(const Tensor& padded, const Geometry& q, const Conv2dParams& p, int64_t n0, int64_t n, Tensor& buf) {
  Tensor& cols6 = reuse(buf, {q.C, q.kh, q.kw, n, q.OH, q.OW}, TensorOptions(padded.dtype(), padded.device()));
  Tensor images = narrow(padded, 0, n0, n);
  for (int64_t i = 0; i < q.kh; ++i)
    for (int64_t j = 0; j < q.kw; ++j) {
      Tensor dst = select(select(cols6, 1, i), 1, j);  // [C, n, OH, OW]
      copy_(dst, permute(windows_at(images, q, p, i, j), {1, 0, 2, 3}));
    }
  return reshape(cols6, {q.G * q.K, n * q.L});
}

// Images [n0, n0 + n) of g [N, O, OH, OW] as [O, n * L] (a view for one image, else a copy in `buf`).
Tensor chunk_as_rows(const Tensor& g, const Geometry& q, int64_t n0, int64_t n, Tensor& buf) {
  if (n == 1) return reshape(select(g, 0, n0), {q.O, q.L});
  Tensor& gc = reuse(buf, {q.O, n * q.L}, TensorOptions(g.dtype(), g.device()));
  Tensor dst = reshape(gc, {q.O, n, q.L});
  copy_(dst, permute(reshape(narrow(g, 0, n0, n), {n, q.O, q.L}), {1, 0, 2}));
  return gc;
}

Tensor im2col_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const Geometry q(x.shape(), weight.shape(), p, x.device());
  const TensorOptions opts(x.dtype(), x.device());
  Tensor xp = pad(x, q, p);
  Tensor w = reshape(weight, {q.O, q.K});
  Tensor out = empty({q.N, q.O, q.OH, q.OW}, opts);
  Tensor cols_buf, prod_buf;
  for (int64_t n0 = 0; n0 < q.N; n0 += q.chunk) {
    const int64_t n = std::min(q.chunk, q.N - n0);
    Tensor cols = im2col(xp, q, p, n0, n, cols_buf);
    // A one-image chunk's product is that image's output in place; larger chunks are transposed into place.
    Tensor prod = n == 1 ? reshape(select(out, 0, n0), {q.O, q.L}) : reuse(prod_buf, {q.O, n * q.L}, opts);
    for (int64_t g = 0; g < q.G; ++g) {
      Tensor dst = group(prod, g, q.Og);
      gemm_(dst, group(w, g, q.Og), false, group(cols, g, q.K), false, 1.0, 0.0);
    }
    if (n > 1) {  // [O, n, L] -> images [n, O, L]
      Tensor dst = reshape(narrow(out, 0, n0, n), {n, q.O, q.L});
      copy_(dst, permute(reshape(prod, {q.O, n, q.L}), {1, 0, 2}));
    }
  }
  if (bias.defined()) add_(out, reshape(bias, {1, q.O, 1, 1}));
  return out;
}

Tensor im2col_backward_data(const Tensor& grad_y, const Tensor& weight, const Shape& input_shape, const Conv2dParams& p) {
  const Geometry q(input_shape, weight.shape(), p, grad_y.device());
  const TensorOptions go(grad_y.dtype(), grad_y.device());
  Tensor g = contiguous(grad_y);
  Tensor w = reshape(weight, {q.O, q.K});
  Tensor gxp = zeros({q.N, q.C, q.Hp, q.Wp}, go);
  Tensor gc_buf, gcols_buf;
  for (int64_t n0 = 0; n0 < q.N; n0 += q.chunk) {
    const int64_t n = std::min(q.chunk, q.N - n0);
    Tensor gc = chunk_as_rows(g, q, n0, n, gc_buf);
    // dcols = W^T g [K, n * L] per group, added back into the padded images offset by offset (col2im).
    Tensor& gcols = reuse(gcols_buf, {q.G * q.K, n * q.L}, go);
    for (int64_t gi = 0; gi < q.G; ++gi) {
      Tensor dc = group(gcols, gi, q.K);
      gemm_(dc, group(w, gi, q.Og), true, group(gc, gi, q.Og), false, 1.0, 0.0);
    }
    Tensor gcols6 = reshape(gcols, {q.C, q.kh, q.kw, n, q.OH, q.OW});
    Tensor images = narrow(gxp, 0, n0, n);
    for (int64_t i = 0; i < q.kh; ++i)
      for (int64_t j = 0; j < q.kw; ++j) {
        Tensor dst = windows_at(images, q, p, i, j);
        add_(dst, permute(select(select(gcols6, 1, i), 1, j), {1, 0, 2, 3}));
      }
  }
  if (!p.padding[0] && !p.padding[1]) return gxp;
  return contiguous(narrow(narrow(gxp, 2, p.padding[0], q.H), 3, p.padding[1], q.W));
}

Conv2dWeightGrads im2col_backward_weight(const Tensor& grad_y, const Tensor& x, const Shape& weight_shape,
                                         bool want_bias, const Conv2dParams& p) {
  const Geometry q(x.shape(), weight_shape, p, x.device());
  const TensorOptions go(grad_y.dtype(), grad_y.device());
  Tensor g = contiguous(grad_y);
  Tensor xp = pad(x, q, p);
  Tensor gw = q.N ? empty({q.O, q.K}, go) : zeros({q.O, q.K}, go);
  Tensor gc_buf, cols_buf;
  for (int64_t n0 = 0; n0 < q.N; n0 += q.chunk) {
    const int64_t n = std::min(q.chunk, q.N - n0);
    Tensor gc = chunk_as_rows(g, q, n0, n, gc_buf);
    Tensor cols = im2col(xp, q, p, n0, n, cols_buf);
    for (int64_t gi = 0; gi < q.G; ++gi) {  // dW += g cols^T, summed over the batch chunk by chunk
      Tensor dw = group(gw, gi, q.Og);
      gemm_(dw, group(gc, gi, q.Og), false, group(cols, gi, q.K), true, 1.0, n0 == 0 ? 0.0 : 1.0);
    }
  }
  return {reshape(gw, weight_shape), want_bias ? sum(g, {0, 2, 3}) : Tensor()};
}

// The kernels' own checks: the shapes nn::functional::conv2d has already checked, as a guard for
// lockstep's other callers.
void check_args(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  LOCKSTEP_CHECK(x.size() == 4 && w.size() == 4 && p.groups > 0 && x[1] == w[1] * p.groups && w[0] % p.groups == 0,
                 op, ": input ", x, " and weight ", w, " with groups = ", p.groups, " do not match");
  const auto out = p.output_size(x[2], x[3], w[2], w[3]);
  LOCKSTEP_CHECK(out[0] > 0 && out[1] > 0, op, ": input ", x, " is smaller than the kernel ", w);
}

// Whether the backend's direct kernel computes this call (Capability::kConv2d): `ts` are its operands
// (x or grad_y first; with no output channels the weight is empty too), all of one dtype and none empty.
// Conv2dAlgo::OneDNN insists (an error where it cannot).
bool use_direct(const Conv2dParams& p, std::initializer_list<Tensor> ts) {
  const Tensor& t = *ts.begin();
  bool applies = supports(t.device(), Capability::kConv2d, t.dtype());
  for (const Tensor& u : ts) applies = applies && (!u.defined() || (u.numel() > 0 && u.dtype() == t.dtype()));
  if (p.algo == Conv2dAlgo::OneDNN)
    LOCKSTEP_CHECK(applies, "conv2d: oneDNN takes non-empty tensors of one dtype on the CPU, float32 or (with "
                   "AVX512-BF16) bfloat16, got ", t.dtype(), " ", t.shape(), " on ", t.device());
  return applies && p.algo != Conv2dAlgo::Im2col;
}

// The direct kernels' outputs, allocated here as the Backend contract asks; operands made contiguous.
Tensor like(const Shape& shape, const Tensor& t) { return Tensor(shape, t.dtype(), t.device()); }

Conv2dGrads direct_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, const Shape& input_shape,
                            const Shape& weight_shape, bool want_input, bool want_weight, bool want_bias,
                            const Conv2dParams& p) {
  Conv2dGrads g;
  if (want_input) g.input = like(input_shape, grad_y);
  if (want_weight) g.weight = like(weight_shape, grad_y);
  if (want_weight && want_bias) g.bias = like({weight_shape[0]}, grad_y);
  if (want_input || want_weight)
    backend_for(grad_y.device()).conv2d_backward(g.input, g.weight, g.bias, contiguous(grad_y),
                                                 x.defined() ? contiguous(x) : x,
                                                 weight.defined() ? contiguous(weight) : weight, p);
  if (want_bias && !want_weight) g.bias = sum(grad_y, {0, 2, 3});
  return g;
}

// bfloat16 operands without a direct kernel (CUDA, no AVX512-BF16, Conv2dAlgo::Im2col, mixed dtypes)
// are computed in float32 and rounded once, as lockstep's other ops on bf16 storage are.
bool bf16(const Tensor& t) { return t.defined() && t.dtype() == kBFloat16; }
Tensor f32(const Tensor& t) { return bf16(t) ? to_dtype(t, kFloat32) : t; }
Tensor to_bf16(const Tensor& t) { return t.defined() ? to_dtype(t, kBFloat16) : t; }

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  check_args("conv2d_forward", x.shape(), weight.shape(), p);
  if (use_direct(p, {x, weight, bias})) {
    const auto out = p.output_size(x.size(2), x.size(3), weight.size(2), weight.size(3));
    Tensor y = like({x.size(0), weight.size(0), out[0], out[1]}, x);
    backend_for(x.device()).conv2d(y, contiguous(x), contiguous(weight), bias.defined() ? contiguous(bias) : bias, p);
    return y;
  }
  if (bf16(x) || bf16(weight)) return to_bf16(conv2d_forward(f32(x), f32(weight), f32(bias), p));
  return im2col_forward(x, weight, bias, p);
}

Tensor conv2d_backward_data(const Tensor& grad_y, const Tensor& weight, const Shape& input_shape,
                            const Conv2dParams& p) {
  check_args("conv2d_backward_data", input_shape, weight.shape(), p);
  if (use_direct(p, {grad_y, weight}))
    return direct_backward(grad_y, Tensor(), weight, input_shape, weight.shape(), true, false, false, p).input;
  if (bf16(grad_y) || bf16(weight)) return to_bf16(conv2d_backward_data(f32(grad_y), f32(weight), input_shape, p));
  return im2col_backward_data(grad_y, weight, input_shape, p);
}

Conv2dWeightGrads conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Shape& weight_shape,
                                         bool want_bias, const Conv2dParams& p) {
  check_args("conv2d_backward_weight", x.shape(), weight_shape, p);
  if (use_direct(p, {x, grad_y})) {
    Conv2dGrads g = direct_backward(grad_y, x, Tensor(), x.shape(), weight_shape, false, true, want_bias, p);
    return {g.weight, g.bias};
  }
  if (bf16(grad_y) || bf16(x)) {
    Conv2dWeightGrads g = conv2d_backward_weight(f32(grad_y), f32(x), weight_shape, want_bias, p);
    return {to_bf16(g.weight), to_bf16(g.bias)};
  }
  return im2col_backward_weight(grad_y, x, weight_shape, want_bias, p);
}

Conv2dGrads conv2d_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight, bool want_input,
                            bool want_weight, bool want_bias, const Conv2dParams& p) {
  check_args("conv2d_backward", x.shape(), weight.shape(), p);
  if (use_direct(p, {x, weight, grad_y}))
    return direct_backward(grad_y, x, weight, x.shape(), weight.shape(), want_input, want_weight, want_bias, p);
  if (bf16(x) || bf16(weight) || bf16(grad_y)) {
    Conv2dGrads g = conv2d_backward(f32(grad_y), f32(x), f32(weight), want_input, want_weight, want_bias, p);
    return {to_bf16(g.input), to_bf16(g.weight), to_bf16(g.bias)};
  }
  Conv2dGrads g;
  if (want_input) g.input = im2col_backward_data(grad_y, weight, x.shape(), p);
  if (want_weight) {
    auto w = im2col_backward_weight(grad_y, x, weight.shape(), want_bias, p);
    g.weight = w.weight, g.bias = w.bias;
  }
  if (want_bias && !want_weight) g.bias = sum(grad_y, {0, 2, 3});
  return g;
}

}  // namespace lockstep::internal
