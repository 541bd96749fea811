// torch's ops that are compositions of lockstep's differentiable ops: flip, roll, repeat,
// repeat_interleave, meshgrid, outer, cross, bmm / addmm / baddbmm, lerp, one_hot and the triangle
// indices. Each is built from views, index_select, cat, matmul, mul/add and where, so none records a
// node of its own: its gradient is the gradient of what it is made of. Errors use PyTorch's wording,
// prefixed with the op and followed by the shapes.
#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "tensor/ops.h"

namespace lockstep {

namespace in = internal;

namespace {

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  return tensor(v, {static_cast<int64_t>(v.size())}, device);
}

// Ops that always return new storage in PyTorch (flip, roll, repeat) return a copy where the composition
// came out as a view of a (nothing to flip, a shift of 0, every repeat 1).
Tensor copied(const Tensor& out, const Tensor& a) { return out.storage() == a.storage() ? clone(out) : out; }

// beta * input + alpha * product, input broadcast to the product's shape (and no further), as
// addmm / baddbmm; beta 0 ignores input, so its NaNs do not reach the result.
Tensor scaled_sum(const Tensor& input, const Tensor& product, double beta, double alpha, const char* op) {
  in::check_defined(input, op);
  const Shape& want = product.shape();
  bool fits = input.dim() <= product.dim();
  for (int64_t i = 1; fits && i <= input.dim(); ++i) {
    const int64_t s = input.size(-i);
    fits = s == 1 || s == want[want.size() - i];
  }
  LOCKSTEP_CHECK(fits, op, ": input of shape ", input.shape(), " does not broadcast to the product's shape ", want,
                 " (the expanded size must match the existing size at each non-singleton dimension)");
  LOCKSTEP_CHECK(input.dtype() == product.dtype(), op, ": expected input of the matrices' dtype ",
                 product.dtype(), ", got ", input.dtype());
  Tensor p = alpha == 1 ? product : mul(product, alpha);
  if (beta == 0) return p;
  return add(beta == 1 ? input : mul(input, beta), p);
}

// bmm's checks, PyTorch's words: [B, n, k] and [B, k, m].
void check_batches(const Tensor& a, const Tensor& b, const char* op) {
  in::check_defined(a, op);
  in::check_defined(b, op);
  LOCKSTEP_CHECK(a.dim() == 3, op, ": batch1 must be a 3D tensor, got shape ", a.shape());
  LOCKSTEP_CHECK(b.dim() == 3, op, ": batch2 must be a 3D tensor, got shape ", b.shape());
  LOCKSTEP_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2), op,
                 ": Expected size for first two dimensions of batch2 tensor to be: [", a.size(0), ", ", a.size(2),
                 "] but got: [", b.size(0), ", ", b.size(1), "] (batch1 ", a.shape(), ", batch2 ", b.shape(), ")");
}

void check_lerp_operand(const Tensor& start, const Tensor& t, const char* name) {
  in::check_defined(t, "lerp");
  LOCKSTEP_CHECK(t.dtype() == start.dtype(), "lerp: expected dtype ", start.dtype(), " for `", name,
                 "` but got dtype ", t.dtype());
}

}  // namespace

Tensor flip(const Tensor& a, const std::vector<int64_t>& dims) {
  in::check_defined(a, "flip");
  std::vector<bool> seen(std::max<int64_t>(a.dim(), 1), false);
  Tensor out = a;
  for (int64_t dim : dims) {
    const int64_t d = in::wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "flip");
    LOCKSTEP_CHECK(!seen[d], "flip: dim ", d, " appears multiple times in the list of dims ", dims);
    seen[d] = true;
    const int64_t n = a.dim() ? a.size(d) : 1;
    if (n <= 1) continue;
    std::vector<int64_t> reversed(n);
    for (int64_t i = 0; i < n; ++i) reversed[i] = n - 1 - i;
    out = index_select(out, d, index_tensor(reversed, a.device()));
  }
  return copied(out, a);
}

Tensor roll(const Tensor& a, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  in::check_defined(a, "roll");
  LOCKSTEP_CHECK(!shifts.empty(), "roll: `shifts` required");
  if (dims.empty()) {
    LOCKSTEP_CHECK(shifts.size() == 1, "roll: shifts and dimensions must align. shifts: ", shifts.size(),
                   ", dims:0 (without dims, one shift over the flattened tensor)");
    return reshape(roll(reshape(a, {-1}), shifts, {0}), a.shape());
  }
  LOCKSTEP_CHECK(shifts.size() == dims.size(), "roll: shifts and dimensions must align. shifts: ", shifts.size(),
                 ", dims:", dims.size());
  Tensor out = a;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = in::wrap_dim(dims[i], a.dim(), "roll");
    const int64_t n = a.size(d);
    if (n == 0) continue;
    const int64_t s = (shifts[i] % n + n) % n;
    if (s == 0) continue;
    // out[j] = a[(j - s) mod n]: the last s elements, then the first n - s.
    out = cat({narrow(out, d, n - s, s), narrow(out, d, 0, n - s)}, d);
  }
  return copied(out, a);
}

Tensor roll(const Tensor& a, int64_t shift, std::optional<int64_t> dim) {
  return dim ? roll(a, std::vector<int64_t>{shift}, std::vector<int64_t>{*dim}) : roll(a, std::vector<int64_t>{shift});
}

Tensor repeat(const Tensor& a, const std::vector<int64_t>& sizes) {
  in::check_defined(a, "repeat");
  const int64_t k = static_cast<int64_t>(sizes.size());
  LOCKSTEP_CHECK(k >= a.dim(), "repeat: Number of dimensions of repeat dims can not be smaller than number of ",
                 "dimensions of tensor (repeats ", sizes, " for a tensor of shape ", a.shape(), ")");
  for (int64_t r : sizes)
    LOCKSTEP_CHECK(r >= 0, "repeat: Trying to create tensor with negative dimension ", r, " (repeats ", sizes,
                   " for a tensor of shape ", a.shape(), ")");
  // a as [1, s0, 1, s1, ...] (1s in front for the dimensions it lacks), expanded to [r0, s0, r1, s1, ...]
  // and merged pairwise: one copy, and expand's gradient sums the tiles back.
  Shape padded(k - a.dim(), 1);
  padded.insert(padded.end(), a.shape().begin(), a.shape().end());
  Shape pairs, tiled, out;
  for (int64_t i = 0; i < k; ++i) {
    pairs.insert(pairs.end(), {1, padded[i]});
    tiled.insert(tiled.end(), {sizes[i], padded[i]});
    out.push_back(sizes[i] * padded[i]);
  }
  return copied(reshape(expand(reshape(a, pairs), tiled), out), a);
}

Tensor repeat_interleave(const Tensor& a, int64_t repeats, std::optional<int64_t> dim) {
  in::check_defined(a, "repeat_interleave");
  LOCKSTEP_CHECK(repeats >= 0, "repeat_interleave: Repeats must be non-negative, got ", repeats);
  const Tensor x = dim && a.dim() > 0 ? a : reshape(a, {-1});
  const int64_t d = dim ? in::wrap_dim(*dim, x.dim(), "repeat_interleave") : 0;
  // x [..., n, ...] -> [..., n, 1, ...] expanded to [..., n, repeats, ...] -> [..., n * repeats, ...].
  Shape expanded = x.shape(), out = x.shape();
  expanded.insert(expanded.begin() + d + 1, repeats);
  out[d] *= repeats;
  return copied(reshape(expand(unsqueeze(x, d + 1), expanded), out), a);
}

Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim) {
  in::check_defined(a, "repeat_interleave");
  in::check_defined(repeats, "repeat_interleave");
  LOCKSTEP_CHECK(repeats.dim() <= 1, "repeat_interleave: repeats must be 0-dim or 1-dim tensor, got shape ",
                 repeats.shape());
  LOCKSTEP_CHECK(repeats.dtype() == kInt64, "repeat_interleave: repeats must be an int64 tensor, got ",
                 repeats.dtype());
  if (repeats.numel() == 1) return repeat_interleave(a, repeats.reshape({}).item<int64_t>(), dim);
  const Tensor x = dim && a.dim() > 0 ? a : reshape(a, {-1});
  const int64_t d = dim ? in::wrap_dim(*dim, x.dim(), "repeat_interleave") : 0;
  LOCKSTEP_CHECK(repeats.size(0) == x.size(d),
                 "repeat_interleave: repeats must have the same size as input along dim, but got repeats.size(0) = ",
                 repeats.size(0), " and input.size(", d, ") = ", x.size(d));
  return index_select(x, d, to(repeat_interleave(repeats), x.device()));
}

Tensor repeat_interleave(const Tensor& repeats) {
  in::check_defined(repeats, "repeat_interleave");
  LOCKSTEP_CHECK(repeats.dim() == 1 && repeats.dtype() == kInt64,
                 "repeat_interleave: repeat_interleave only accept 1D vector as repeat (int64), got shape ",
                 repeats.shape(), " ", repeats.dtype());
  std::vector<int64_t> index;
  const std::vector<int64_t> counts = repeats.to_vector<int64_t>();
  for (size_t i = 0; i < counts.size(); ++i) {
    LOCKSTEP_CHECK(counts[i] >= 0, "repeat_interleave: repeats can not be negative, got ", counts[i], " at ", i);
    index.insert(index.end(), counts[i], static_cast<int64_t>(i));
  }
  return index_tensor(index, repeats.device());
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  LOCKSTEP_CHECK(!tensors.empty(), "meshgrid: expects a non-empty TensorList");
  LOCKSTEP_CHECK(indexing == "ij" || indexing == "xy",
                 "meshgrid: indexing must be one of \"xy\" or \"ij\", but received: ", indexing);
  Shape grid;
  for (const Tensor& t : tensors) {
    in::check_defined(t, "meshgrid");
    LOCKSTEP_CHECK(t.dim() <= 1, "meshgrid: Expected 0D or 1D tensor in the tensor list but got a tensor of shape ",
                   t.shape());
    LOCKSTEP_CHECK(t.dtype() == tensors[0].dtype(), "meshgrid: expects all tensors to have the same dtype, got ",
                   tensors[0].dtype(), " and ", t.dtype());
    in::check_same_device(tensors[0], t, "meshgrid");
    grid.push_back(t.numel());
  }
  const bool xy = indexing == "xy" && tensors.size() >= 2;
  if (xy) std::swap(grid[0], grid[1]);
  std::vector<Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t at = xy && i < 2 ? 1 - i : i;  // the grid dimension input i runs along
    Shape s(grid.size(), 1);
    s[at] = grid[at];
    out.push_back(expand(reshape(tensors[i], s), grid));
  }
  return out;
}

Tensor outer(const Tensor& a, const Tensor& b) {
  in::check_defined(a, "outer");
  in::check_defined(b, "outer");
  LOCKSTEP_CHECK(a.dim() == 1, "outer: Expected 1-D argument self, but got ", a.dim(), "-D (shape ", a.shape(), ")");
  LOCKSTEP_CHECK(b.dim() == 1, "outer: Expected 1-D argument vec2, but got ", b.dim(), "-D (shape ", b.shape(), ")");
  return mul(unsqueeze(a, 1), unsqueeze(b, 0));  // [n, 1] * [1, m]
}

Tensor cross(const Tensor& a, const Tensor& b, std::optional<int64_t> dim) {
  in::check_defined(a, "cross");
  in::check_defined(b, "cross");
  LOCKSTEP_CHECK(a.dim() == b.dim(), "cross: inputs must have the same number of dimensions, got ", a.shape(),
                 " and ", b.shape());
  LOCKSTEP_CHECK(a.dtype() == b.dtype(), "cross: expected scalar type ", a.dtype(), " but found ", b.dtype());
  int64_t d = 0;
  if (dim) {
    d = in::wrap_dim(*dim, a.dim(), "cross");
  } else {
    while (d < a.dim() && a.size(d) != 3) ++d;
    LOCKSTEP_CHECK(d < a.dim(), "cross: no dimension of size 3 in input of shape ", a.shape());
  }
  LOCKSTEP_CHECK(a.size(d) == 3 && b.size(d) == 3, "cross: inputs dimension ", d, " must have length 3. Got ",
                 a.size(d), " and ", b.size(d), " (shapes ", a.shape(), " and ", b.shape(), ")");
  // c_i = a_{i+1} b_{i+2} - a_{i+2} b_{i+1} (indices mod 3), all three at once.
  const Tensor next = index_tensor({1, 2, 0}, a.device()), after = index_tensor({2, 0, 1}, a.device());
  return sub(mul(index_select(a, d, next), index_select(b, d, after)),
             mul(index_select(a, d, after), index_select(b, d, next)));
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_batches(a, b, "bmm");
  return matmul(a, b);
}

Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, double beta, double alpha) {
  in::check_defined(mat1, "addmm");
  in::check_defined(mat2, "addmm");
  LOCKSTEP_CHECK(mat1.dim() == 2, "addmm: mat1 must be a matrix, got ", mat1.dim(), "-D tensor of shape ",
                 mat1.shape());
  LOCKSTEP_CHECK(mat2.dim() == 2, "addmm: mat2 must be a matrix, got ", mat2.dim(), "-D tensor of shape ",
                 mat2.shape());
  LOCKSTEP_CHECK(mat1.size(1) == mat2.size(0), "addmm: mat1 and mat2 shapes cannot be multiplied (", mat1.size(0),
                 "x", mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  return scaled_sum(input, matmul(mat1, mat2), beta, alpha, "addmm");
}

Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta, double alpha) {
  check_batches(batch1, batch2, "baddbmm");
  return scaled_sum(input, matmul(batch1, batch2), beta, alpha, "baddbmm");
}

Tensor lerp(const Tensor& start, const Tensor& end, double weight) {
  in::check_defined(start, "lerp");
  check_lerp_operand(start, end, "end");
  in::broadcast_shapes(start.shape(), end.shape(), "lerp");
  // at::lerp's two forms: from start for a small weight, from end otherwise (weight 1 gives end exactly).
  const Tensor diff = sub(end, start);
  return std::abs(weight) < 0.5 ? add(start, mul(diff, weight)) : sub(end, mul(diff, 1 - weight));
}

Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  in::check_defined(start, "lerp");
  check_lerp_operand(start, end, "end");
  check_lerp_operand(start, weight, "weight");
  in::broadcast_shapes(in::broadcast_shapes(start.shape(), end.shape(), "lerp"), weight.shape(), "lerp");
  const Tensor diff = sub(end, start);
  return where(abs(weight.detach()) < 0.5, add(start, mul(weight, diff)), sub(end, mul(diff, rsub(weight, 1.0))));
}

Tensor one_hot(const Tensor& a, int64_t num_classes) {
  in::check_defined(a, "one_hot");
  LOCKSTEP_CHECK(a.dtype() == kInt64, "one_hot: is only applicable to index tensor of type LongTensor (int64), got ",
                 a.dtype());
  if (a.numel() == 0) {
    LOCKSTEP_CHECK(num_classes != -1, "one_hot: Can not infer total number of classes from empty tensor.");
  } else {
    const int64_t lo = min(a).item<int64_t>(), hi = max(a).item<int64_t>();
    LOCKSTEP_CHECK(lo >= 0, "one_hot: Class values must be non-negative, got ", lo);
    if (num_classes == -1) num_classes = hi + 1;
    LOCKSTEP_CHECK(hi < num_classes, "one_hot: Class values must be smaller than num_classes (", num_classes,
                   "), got ", hi);
  }
  LOCKSTEP_CHECK(num_classes >= 0, "one_hot: num_classes must be -1 or non-negative, got ", num_classes);
  // [..., 1] == [C] -> [..., C]
  return to(eq(unsqueeze(a, -1), arange(num_classes, TensorOptions(kInt64, a.device()))), kInt64);
}

namespace {

// (i, j) for every i < row, j < col with j - i <= offset (lower) or >= offset (upper), row by row.
Tensor triangle_indices(int64_t row, int64_t col, int64_t offset, TensorOptions options, bool lower,
                        const char* op) {
  LOCKSTEP_CHECK(row >= 0, op, ": row must be non-negative, got ", row);
  LOCKSTEP_CHECK(col >= 0, op, ": col must be non-negative, got ", col);
  std::vector<int64_t> rows, cols;
  for (int64_t i = 0; i < row; ++i)
    for (int64_t j = 0; j < col; ++j)
      if (lower ? j - i <= offset : j - i >= offset) {
        rows.push_back(i);
        cols.push_back(j);
      }
  const int64_t n = static_cast<int64_t>(rows.size());
  rows.insert(rows.end(), cols.begin(), cols.end());
  return to(tensor(rows, {2, n}, options.device), options.dtype);
}

}  // namespace

Tensor tril_indices(int64_t row, int64_t col, int64_t offset, TensorOptions options) {
  return triangle_indices(row, col, offset, options, true, "tril_indices");
}
Tensor triu_indices(int64_t row, int64_t col, int64_t offset, TensorOptions options) {
  return triangle_indices(row, col, offset, options, false, "triu_indices");
}

}  // namespace lockstep
