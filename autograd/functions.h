// lockstep's user-facing ops, with PyTorch's names and semantics (torch.* / torch.nn.functional.*).
// Every one is differentiable where PyTorch's is; the few that are not (comparisons, argmax, sort
// indices, ...) say so. Each records its backward in autograd/*.cpp right beside its forward; inputs
// that do not require a gradient (and everything under NoGradGuard) cost nothing extra.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tensor/factory.h"  // TensorOptions
#include "tensor/tensor.h"

namespace lockstep {

// --- elementwise (autograd/elementwise.cpp); operands broadcast and promote as in PyTorch ---
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor rsub(const Tensor& a, double s);  // s - a
Tensor rdiv(const Tensor& a, double s);  // s / a
Tensor pow(const Tensor& a, double exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& a, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor neg(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor sign(const Tensor& a);  // gradient 0
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor square(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor silu(const Tensor& a);
// approximate: "none" (erf, the default) or "tanh", as torch.nn.functional.gelu.
Tensor gelu(const Tensor& a, const std::string& approximate = "none");
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);
Tensor tril(const Tensor& a, int64_t diagonal = 0);
Tensor triu(const Tensor& a, int64_t diagonal = 0);
// Comparisons and logical ops: bool results, not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);

// --- elementwise math (autograd/elementwise_math.cpp) ---
// floor, ceil, round (half to even), trunc: integers unchanged, gradient 0.
Tensor floor(const Tensor& a);
Tensor ceil(const Tensor& a);
Tensor round(const Tensor& a);
Tensor trunc(const Tensor& a);
Tensor frac(const Tensor& a);  // a - trunc(a)
Tensor reciprocal(const Tensor& a);
Tensor log1p(const Tensor& a);
Tensor expm1(const Tensor& a);
Tensor log2(const Tensor& a);
Tensor log10(const Tensor& a);
Tensor erf(const Tensor& a);
Tensor erfc(const Tensor& a);
Tensor erfinv(const Tensor& a);
Tensor tan(const Tensor& a);
Tensor asin(const Tensor& a);
Tensor acos(const Tensor& a);
Tensor atan(const Tensor& a);
Tensor sinh(const Tensor& a);
Tensor cosh(const Tensor& a);
Tensor atan2(const Tensor& a, const Tensor& b);
// fmod: the remainder has a's sign (C's fmod); remainder: b's sign (Python's %). Integer divisors of 0
// are refused, as div's.
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, double b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double b);
Tensor clamp_min(const Tensor& a, double min);
Tensor clamp_max(const Tensor& a, double max);
// Bool results, not differentiable; integers are finite.
Tensor isnan(const Tensor& a);
Tensor isinf(const Tensor& a);
Tensor isfinite(const Tensor& a);

// --- activations (autograd/activation.cpp), torch.nn.functional's, each one elementwise row ---
Tensor elu(const Tensor& a, double alpha = 1.0);
Tensor selu(const Tensor& a);
Tensor celu(const Tensor& a, double alpha = 1.0);
Tensor softplus(const Tensor& a, double beta = 1.0, double threshold = 20.0);
Tensor hardtanh(const Tensor& a, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& a);
Tensor hardshrink(const Tensor& a, double lambd = 0.5);
Tensor softshrink(const Tensor& a, double lambd = 0.5);
Tensor threshold(const Tensor& a, double threshold, double value);
Tensor leaky_relu(const Tensor& a, double negative_slope = 0.01);
Tensor hardsigmoid(const Tensor& a);
Tensor hardswish(const Tensor& a);
Tensor mish(const Tensor& a);
Tensor logsigmoid(const Tensor& a);
Tensor softsign(const Tensor& a);
Tensor tanhshrink(const Tensor& a);
// The first half of `dim` gated by the sigmoid of the second: a * sigmoid(b).
Tensor glu(const Tensor& a, int64_t dim = -1);
// a where a >= 0, else weight * a; weight [1] or [C], C the input's dimension 1.
Tensor prelu(const Tensor& a, const Tensor& weight);
// Training: a slope drawn uniformly from [lower, upper] per element; evaluation: their mean.
Tensor rrelu(const Tensor& a, double lower = 1.0 / 8.0, double upper = 1.0 / 3.0, bool training = false);
Tensor softmin(const Tensor& a, int64_t dim);  // softmax(-a)

// --- shapes and views (autograd/views.cpp): views share storage ---
Tensor reshape(const Tensor& a, const Shape& shape);
Tensor view(const Tensor& a, const Shape& shape);
Tensor transpose(const Tensor& a);  // 2-D
Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor expand(const Tensor& a, const Shape& shape);
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& a, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a, int64_t dim);
Tensor squeeze(const Tensor& a);
Tensor contiguous(const Tensor& a);
Tensor flatten(const Tensor& a, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);
// The slices along dim, each without that dimension (select(a, dim, i) for every i), as torch.unbind:
// `auto qkv = unbind(x, 0);` for timm's `q, k, v = qkv.unbind(0)`.
std::vector<Tensor> unbind(const Tensor& a, int64_t dim = 0);
// A view of a's elements (taken in row-major order) with the given shape, strides and offset; windows
// may overlap, their gradients add up. The building block of unfold (and of im2col for convolutions).
Tensor as_strided(const Tensor& a, const Shape& shape, const Strides& strides, int64_t storage_offset = 0);
// Windows of `size` elements every `step` along dim, as a new last dimension (torch.Tensor.unfold).
Tensor unfold(const Tensor& a, int64_t dim, int64_t size, int64_t step);

// --- indexing (autograd/indexing.cpp) ---
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
Tensor index_select(const Tensor& a, const Tensor& index);  // dim 0
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
// out = a with src added at index along dim (out-of-place scatter_add / index_add).
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
// --- scatters and index_put (autograd/scatter_ops.cpp); in place: Tensor::scatter_, scatter_reduce_,
// index_put_ ---
// a with src (or value) written at index along dim; reduce "add" or "multiply" (scatter's deprecated
// form) adds or multiplies instead. src's dtype must be a's.
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, double value);
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce);
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, double value, const std::string& reduce);
// src reduced into a at index along dim: reduce "sum", "prod", "mean", "amax" or "amin"; without
// include_self, a's values where something is scattered are left out. Gradients as PyTorch's (amax and
// amin split among ties; prod's exact with one zero).
Tensor scatter_reduce(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self = true);
// a[indices] = values (or += with accumulate): int64 or bool index tensors for a's leading dimensions
// (a bool mask takes as many as it has), broadcast together and read on the host; values broadcast to
// the indexed shape and of a's dtype.
Tensor index_put(const Tensor& a, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false);

// --- ops sized by the values (autograd/selection_ops.cpp): they read values on the host ---
Tensor nonzero(const Tensor& a);   // int64 [n, a.dim()], the coordinates of the nonzero elements
Tensor argwhere(const Tensor& a);  // nonzero(a)
// a's elements where mask (bool, broadcast with a) is true, 1-D; differentiable.
Tensor masked_select(const Tensor& a, const Tensor& mask);
// a with the positions where mask is true filled from source's elements in order; differentiable.
Tensor masked_scatter(const Tensor& a, const Tensor& mask, const Tensor& source);
// (values, inverse, counts) over the flattened elements, as torch._unique2: values sorted (also for
// sorted=false), inverse (a's shape) each element's position in values, counts per value; the ones
// not asked for are empty int64 tensors. unique is the same call.
std::tuple<Tensor, Tensor, Tensor> _unique2(const Tensor& a, bool sorted = true, bool return_inverse = false,
                                            bool return_counts = false);
std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& a, bool sorted = true, bool return_inverse = false,
                                          bool return_counts = false);
// The same for runs of equal consecutive elements, unsorted (dim: only std::nullopt, the flattened ones).
std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& a, bool return_inverse = false,
                                                      bool return_counts = false,
                                                      std::optional<int64_t> dim = std::nullopt);
// Occurrences of each value of a 1-D non-negative integer tensor (int64), or the sums of their weights
// (float32 weights: float32, others float64); at least minlength bins. Not differentiable.
Tensor bincount(const Tensor& a, const Tensor& weights = Tensor(), int64_t minlength = 0);
// Histogram in `bins` equal bins over [min, max] (both 0: the data's range), in a's dtype; not differentiable.
Tensor histc(const Tensor& a, int64_t bins = 100, double min = 0, double max = 0);
// With a tensor bound (autograd/clamp_tensor.cpp): broadcast, NaN propagates.
Tensor clamp_min(const Tensor& a, const Tensor& min);
Tensor clamp_max(const Tensor& a, const Tensor& max);

// Values are differentiable; indices (int64) are not.
std::pair<Tensor, Tensor> sort(const Tensor& a, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& a, int64_t dim = -1, bool descending = false);
std::pair<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true);

// --- reductions (autograd/reduce.cpp); `dims` {} means all dimensions ---
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
// The product; its gradient handles zeros as PyTorch's (one zero: the product of the others there).
Tensor prod(const Tensor& a);
Tensor prod(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor var(const Tensor& a, const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& a, const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor max(const Tensor& a);  // over all elements
Tensor min(const Tensor& a);
// (values, indices) along dim, as torch.max(x, dim): `auto [v, i] = max(x, 1);`. Values carry the
// gradient (to the element the index points at); indices are int64.
std::tuple<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor amax(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor amin(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);  // int64, not differentiable
Tensor argmin(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim = false);
// The p-norm over dims (p = 2 by default; any p > 0, and inf).
Tensor norm(const Tensor& a, double p = 2, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);

// --- scans (autograd/scan.cpp), along one dimension ---
// Running sums and products: bool and integer inputs give int64 unless `dtype` is given (a converted to
// it first, as torch.cumsum(x, dim, dtype=...)). cumprod's gradient handles zeros as PyTorch's.
Tensor cumsum(const Tensor& a, int64_t dim, std::optional<Dtype> dtype = std::nullopt);
Tensor cumprod(const Tensor& a, int64_t dim, std::optional<Dtype> dtype = std::nullopt);
Tensor logcumsumexp(const Tensor& a, int64_t dim);  // log(cumsum(exp(a))), never overflowing
// (values, indices), as torch.cummax: the running maximum (minimum) and the int64 position it came from,
// ties and NaN going to the later one: `auto [v, i] = cummax(x, 1);`. Values carry the gradient, to the
// positions in indices.
std::tuple<Tensor, Tensor> cummax(const Tensor& a, int64_t dim);
std::tuple<Tensor, Tensor> cummin(const Tensor& a, int64_t dim);

// --- matrix products and losses (autograd/linalg.cpp) ---
// torch.matmul: 1-D, 2-D, batched and broadcast batch dimensions.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x @ weight^T + bias, as torch.nn.functional.linear: x [..., in], weight [out, in], bias [out] or
// undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Mean over the batch of -logp[i, target[i]].
Tensor nll_loss(const Tensor& logp, const Tensor& target);

// --- recurrent gate steps (autograd/rnn_cell.cpp): the elementwise part of one LSTM / GRU step ---
// gates [B, 4H] (pre-activations of i, f, g, o, PyTorch's order), c [B, H] -> [B, 2H]: h' = o tanh(c')
// in the first H columns, c' = f c + i g in the last H.
Tensor lstm_gates(const Tensor& gates, const Tensor& c);
// gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh, both [B, 3H] (r, z, n), h [B, H] -> h' [B, H]:
// r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r gh_n), h' = (1 - z) n + z h.
Tensor gru_gates(const Tensor& gi, const Tensor& gh, const Tensor& h);

// --- recurrent layers (autograd/rnn_layer.cpp): every step of one layer and direction as one op ---
// x_gates [T, B, G*H]: all steps' input projections (x W_ih^T + b_ih, plus b_hh for LSTM), w_hh
// [G*H, H], h0 and c0 [B, H]; steps run from T - 1 down with `reverse`. Returns the states in position
// order, h0 included (tensor/ops.h's lstm_layer gives the rows): LSTM [2, T + 1, B, H] (h, then c),
// GRU [T + 1, B, H]; GRU adds b_hh [3H] (or undefined) to h W_hh^T at each step. What nn::LSTM and
// nn::GRU run; one node per call, its backward one product for W_hh's gradient over all steps.
Tensor lstm_layer(const Tensor& x_gates, const Tensor& h0, const Tensor& c0, const Tensor& w_hh, bool reverse = false);
Tensor gru_layer(const Tensor& x_gates, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh, bool reverse = false);

// --- compositions (autograd/composite.cpp, autograd/einsum.cpp), as torch.*: each is built from the
// differentiable ops above (views, index_select, cat, matmul, mul, where), so its gradient is theirs ---
// The elements in reverse order along each of dims (a copy, as PyTorch's).
Tensor flip(const Tensor& a, const std::vector<int64_t>& dims);
// Elements shifted by shifts[i] along dims[i], those past the end coming back at the start. With no dims,
// one shift over the flattened elements, the shape kept.
Tensor roll(const Tensor& a, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {});
Tensor roll(const Tensor& a, int64_t shift, std::optional<int64_t> dim = std::nullopt);
// a tiled sizes[i] times along dimension i; sizes may be longer than a's rank (new leading dimensions).
Tensor repeat(const Tensor& a, const std::vector<int64_t>& sizes);
// Each element (slice along dim) repeated `repeats` times in place, or repeats[i] times for the i-th
// (int64, one per slice or a single count); without dim, over the flattened elements.
Tensor repeat_interleave(const Tensor& a, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);
// The indices 0, 1, ... each repeated repeats[i] times (torch.repeat_interleave(repeats)); int64.
Tensor repeat_interleave(const Tensor& repeats);
// Coordinate grids from 0-D or 1-D tensors: expanded views, one per input. "ij": dimension i of the grid
// follows input i; "xy": the first two swapped (NumPy's, for images: x along columns).
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing = "ij");
Tensor outer(const Tensor& a, const Tensor& b);  // [n] x [m] -> [n, m]
// The cross product of 3-vectors along dim (both of size 3 there; the other dimensions broadcast). Without
// dim, the first dimension of size 3, as torch.cross's (deprecated) default; torch.linalg.cross's is -1.
Tensor cross(const Tensor& a, const Tensor& b, std::optional<int64_t> dim = std::nullopt);
Tensor bmm(const Tensor& a, const Tensor& b);  // [B, n, k] @ [B, k, m], no broadcasting
// beta * input + alpha * (mat1 @ mat2), input broadcast to [n, m]; with beta 0 input is ignored (NaN too).
Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, double beta = 1, double alpha = 1);
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta = 1, double alpha = 1);
// start + weight * (end - start), computed as PyTorch's (from end for |weight| >= 0.5, so 1 gives end).
Tensor lerp(const Tensor& start, const Tensor& end, double weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
// [..., num_classes] int64 rows with a 1 at each class of the int64 `a` (num_classes -1: max + 1); not
// differentiable. Also nn::functional::one_hot, LibTorch's spelling.
Tensor one_hot(const Tensor& a, int64_t num_classes = -1);
// The [2, N] (row, column) indices of a row x col matrix's lower (upper) triangle, diagonal `offset`
// included, row by row.
Tensor tril_indices(int64_t row, int64_t col, int64_t offset = 0, TensorOptions options = TensorOptions(kInt64));
Tensor triu_indices(int64_t row, int64_t col, int64_t offset = 0, TensorOptions options = TensorOptions(kInt64));
// Einstein summation: "bhqd,bhkd->bhqk", implicit outputs ("ij,jk"), "..." for broadcast leading
// dimensions, a repeated subscript in one operand for its diagonal ("ii->i"), sums over subscripts not in
// the output. Operands contract left to right, each pair one batched matmul, as PyTorch's (without
// opt_einsum's path).
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

// --- conversion ---
Tensor to(const Tensor& a, Device device);
Tensor to(const Tensor& a, Dtype dtype);
Tensor clone(const Tensor& a);

// --- random (autograd/random.cpp): drawn from the default generator (manual_seed) ---
// Each element 1 with probability p (p's shape), else 0; not differentiable.
Tensor bernoulli(const Tensor& p);
// Draws num_samples indices per row of non-negative weights [C] or [N, C].
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);
// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when `train`.
Tensor dropout(const Tensor& a, double p = 0.5, bool train = true);

// True when every element differs by at most atol + rtol * |b| (and NaNs match).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// In place (Tensor::add_ ...): recorded by autograd as PyTorch's; see tensor.h.
const Tensor& operator+=(const Tensor& a, const Tensor& b);
const Tensor& operator-=(const Tensor& a, const Tensor& b);
const Tensor& operator*=(const Tensor& a, const Tensor& b);
const Tensor& operator/=(const Tensor& a, const Tensor& b);
const Tensor& operator+=(const Tensor& a, double s);
const Tensor& operator-=(const Tensor& a, double s);
const Tensor& operator*=(const Tensor& a, double s);
const Tensor& operator/=(const Tensor& a, double s);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);
Tensor operator/(double s, const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double s);
Tensor operator!=(const Tensor& a, double s);
Tensor operator<(const Tensor& a, double s);
Tensor operator<=(const Tensor& a, double s);
Tensor operator>(const Tensor& a, double s);
Tensor operator>=(const Tensor& a, double s);
// On bool tensors, as PyTorch's mask & mask, mask | mask, ~mask.
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& a);

}  // namespace lockstep
