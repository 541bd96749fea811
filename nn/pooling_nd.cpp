// Pooling for 1, 2 and 3 spatial dimensions (nn/pooling.h). Values-only 1-D and 2-D max and average
// pooling run the fused 2-D kernels (nn/pooling.cpp); everything else is composed, one spatial
// dimension at a time, from differentiable ops, so gradients come from those ops:
//  - a maximum over windows: index_select the windows' taps, take max over the tap dimension, and
//    carry each maximum's plane position along (gathered by the same argmax). Padding taps repeat a
//    real cell of their window, which changes neither the maximum nor its first position; taking the
//    last dimension first gives the first maximum in (d, h, w) order, PyTorch's choice.
//  - an average over windows: a matmul with a [out, n] averaging matrix per dimension (the divisor
//    of a window is a product of per-dimension counts, with or without padding, so it factors).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/pooling.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn::functional {

namespace {

const char* const kMaxName[] = {"", "max_pool1d", "max_pool2d", "max_pool3d"};
const char* const kAvgName[] = {"", "avg_pool1d", "avg_pool2d", "avg_pool3d"};

// x [N, C, spatial...] or [C, spatial...] -> planes [P, spatial...]; `batch` keeps the leading sizes.
struct Planes {
  Tensor x;
  Shape batch;
};
Planes planes(const char* fn, const Tensor& x, size_t D) {
  LOCKSTEP_CHECK(x.defined() && (x.dim() == static_cast<int64_t>(D) + 1 || x.dim() == static_cast<int64_t>(D) + 2),
                 fn, ": expected a ", D + 1, "-D or ", D + 2, "-D input ([C, spatial] or [N, C, spatial] with ", D,
                 " spatial dimensions), got ", x.defined() ? x.shape() : Shape{});
  const int64_t lead = x.dim() - static_cast<int64_t>(D);
  Shape batch(x.shape().begin(), x.shape().begin() + lead), spatial(x.shape().begin() + lead, x.shape().end());
  for (int64_t n : spatial)
    LOCKSTEP_CHECK(n > 0, fn, ": input ", x.shape(), " has an empty spatial dimension");
  int64_t p = 1;
  for (int64_t b : batch) p *= b;
  spatial.insert(spatial.begin(), p);
  return {reshape(x, spatial), batch};
}
Tensor unplanes(const Tensor& y, const Shape& batch) {
  Shape s = batch;
  s.insert(s.end(), y.shape().begin() + 1, y.shape().end());
  return reshape(y, s);
}

// One dimension's windows: taps[o * K + j] is the position of tap j of output o, always a real cell.
struct Windows {
  int64_t out = 0, K = 0;
  std::vector<int64_t> taps;
};

// PyTorch's pooling output size (pooling_output_shape), ceil_mode's last window starting inside the
// input or its left padding.
int64_t pooled_size(const char* fn, int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  LOCKSTEP_CHECK(k > 0 && s > 0 && d > 0, fn, ": kernel_size ", k, ", stride ", s, " and dilation ", d,
                 " must be positive");
  LOCKSTEP_CHECK(p >= 0 && p <= (d * (k - 1) + 1) / 2, fn, ": pad should be at most half of effective kernel size, "
                 "but got pad=", p, ", kernel_size=", k, " and dilation=", d);
  int64_t out = (n + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  LOCKSTEP_CHECK(n + 2 * p - d * (k - 1) - 1 >= 0 && out > 0, fn, ": given input size ", n,
                 ", the calculated output size ", out, " is too small (kernel ", k, ", padding ", p, ")");
  return out;
}

// Strided windows of k taps, `d` apart, starting at o * s - p; taps outside [0, n) repeat the window's
// first real cell.
Windows strided_windows(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out) {
  Windows w{out, k, std::vector<int64_t>(static_cast<size_t>(out * k))};
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * s - p;
    int64_t first = -1;
    for (int64_t j = 0; j < k && first < 0; ++j)
      if (start + j * d >= 0 && start + j * d < n) first = start + j * d;
    LOCKSTEP_CHECK(first >= 0, "pooling: window ", o, " of a size-", n, " dimension holds only padding");
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = start + j * d;
      w.taps[o * k + j] = at >= 0 && at < n ? at : first;
    }
  }
  return w;
}

// Adaptive windows [floor(o n / out), ceil((o + 1) n / out)), padded to the longest by their last cell.
Windows adaptive_windows(int64_t n, int64_t out) {
  auto lo = [&](int64_t o) { return o * n / out; };
  auto hi = [&](int64_t o) { return ((o + 1) * n + out - 1) / out; };
  Windows w{out, 0, {}};
  for (int64_t o = 0; o < out; ++o) w.K = std::max(w.K, hi(o) - lo(o));
  w.taps.resize(static_cast<size_t>(out * w.K));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t j = 0; j < w.K; ++j) w.taps[o * w.K + j] = std::min(lo(o) + j, hi(o) - 1);
  return w;
}

// The maximum over each window along `dim` of v [P, spatial...]; pos (if defined, v's shape) the plane
// position each value came from, carried to the maxima. taps: [out * K] int64 (the same windows for
// every plane) or v's shape with dim's size out * K (each plane its own, for gather).
void max_stage(Tensor& v, Tensor& pos, int64_t dim, int64_t out, int64_t K, const Tensor& taps) {
  const bool per_plane = taps.dim() > 1;
  Tensor g = per_plane ? gather(v, dim, taps) : index_select(v, dim, taps);
  Shape s = g.shape();
  s[dim] = out;
  s.insert(s.begin() + dim + 1, K);
  auto [m, arg] = max(reshape(g, s), dim + 1, /*keepdim=*/true);
  if (pos.defined()) {
    Tensor p = per_plane ? internal::gather(pos, dim, taps) : internal::index_select(pos, dim, taps);
    pos = internal::squeeze(internal::gather(internal::reshape(p, s), dim + 1, arg), dim + 1);
  }
  v = squeeze(m, dim + 1);
}

Tensor taps_tensor(const Windows& w, Device device) { return to(tensor(w.taps, {w.out * w.K}), device); }

// The plane position of every cell of v [P, spatial...]: d * H * W + h * W + w, expanded over planes.
Tensor plane_positions(const Tensor& v) {
  Shape s = v.shape();
  s[0] = 1;
  const int64_t cells = v.numel() / std::max<int64_t>(v.size(0), 1);
  Tensor p = internal::reshape(to(arange(cells), v.device()), s);
  return internal::contiguous(internal::expand(p, v.shape()));
}

// Max pooling of planes [P, spatial...] over windows per dimension (the last dimension first, for
// PyTorch's tie order); returns (values, positions) with positions only if `with_indices`.
std::tuple<Tensor, Tensor> separable_max(const Tensor& x, const std::vector<Windows>& windows, bool with_indices) {
  Tensor v = x, pos = with_indices ? plane_positions(x) : Tensor();
  for (int64_t i = static_cast<int64_t>(windows.size()) - 1; i >= 0; --i)
    max_stage(v, pos, i + 1, windows[i].out, windows[i].K, taps_tensor(windows[i], x.device()));
  return {v, pos};
}

// y = A x along `dim` of v, A [out, n] (v's dtype).
Tensor along(const Tensor& v, int64_t dim, const Tensor& A) {
  return transpose(matmul(transpose(v, dim, -1), transpose(A, 0, 1)), dim, -1);
}

// Averages of planes [P, spatial...], one [out, n] matrix per dimension (row o: the window's weights);
// reduced floating types average in float32, rounded once, as PyTorch's accumulation.
Tensor separable_average(const Tensor& x, const std::vector<std::vector<double>>& rows, const std::vector<int64_t>& outs,
                         double scale) {
  const Dtype acc = is_reduced_floating_point(x.dtype()) ? kFloat32 : x.dtype();
  Tensor v = to(x, acc);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t n = x.size(static_cast<int64_t>(i) + 1);
    v = along(v, static_cast<int64_t>(i) + 1, to(to(tensor(rows[i], {outs[i], n}), acc), x.device()));
  }
  if (scale != 1) v = mul(v, scale);
  return to(v, x.dtype());
}

template <size_t D>
ExpandingArray<D> default_stride(ExpandingArray<D> stride, ExpandingArray<D> kernel) {
  std::array<int64_t, D> s = stride.values();
  for (size_t i = 0; i < D; ++i)
    if (s[i] == 0) s[i] = kernel[i];
  return s;
}

}  // namespace

template <size_t D>
std::tuple<Tensor, Tensor> max_pool_with_indices(const Tensor& input, const MaxPoolOptions<D>& o) {
  const char* fn = kMaxName[D];
  internal::check_floating(input, fn);
  Planes p = planes(fn, input, D);
  const auto stride = default_stride<D>(o.stride(), o.kernel_size());
  std::vector<Windows> windows;
  for (size_t i = 0; i < D; ++i) {
    const int64_t n = p.x.size(static_cast<int64_t>(i) + 1);
    const int64_t out = pooled_size(fn, n, o.kernel_size()[i], stride[i], o.padding()[i], o.dilation()[i], o.ceil_mode());
    windows.push_back(strided_windows(n, o.kernel_size()[i], stride[i], o.padding()[i], o.dilation()[i], out));
  }
  auto [v, pos] = separable_max(p.x, windows, true);
  return {unplanes(v, p.batch), unplanes(pos, p.batch)};
}

template <size_t D>
Tensor max_pool(const Tensor& input, const MaxPoolOptions<D>& o) {
  if constexpr (D == 3) {
    return std::get<0>(max_pool_with_indices<3>(input, o));
  } else {
    const char* fn = kMaxName[D];
    Planes p = planes(fn, input, D);  // the input's checks, in this function's name
    const auto stride = default_stride<D>(o.stride(), o.kernel_size());
    for (size_t i = 0; i < D; ++i)
      pooled_size(fn, p.x.size(static_cast<int64_t>(i) + 1), o.kernel_size()[i], stride[i], o.padding()[i],
                  o.dilation()[i], o.ceil_mode());
    if constexpr (D == 2) {
      return max_pool2d(input, o.kernel_size(), stride, o.padding(), o.dilation(), o.ceil_mode());
    } else {  // a 1-D pooling is a 2-D one of height 1
      return squeeze(max_pool2d(unsqueeze(input, -2), {1, o.kernel_size()[0]}, {1, stride[0]}, {0, o.padding()[0]},
                                {1, o.dilation()[0]}, o.ceil_mode()),
                     -2);
    }
  }
}

template <size_t D>
Tensor avg_pool(const Tensor& input, const AvgPoolOptions<D>& o) {
  const char* fn = kAvgName[D];
  internal::check_floating(input, fn);
  Planes p = planes(fn, input, D);
  const auto stride = default_stride<D>(o.stride(), o.kernel_size());
  std::vector<int64_t> outs;
  for (size_t i = 0; i < D; ++i)
    outs.push_back(pooled_size(fn, p.x.size(static_cast<int64_t>(i) + 1), o.kernel_size()[i], stride[i],
                               o.padding()[i], 1, o.ceil_mode()));
  if (o.divisor_override().has_value())
    LOCKSTEP_CHECK(*o.divisor_override() != 0, fn, ": divisor must be not zero");
  else if constexpr (D == 2)
    return avg_pool2d(input, o.kernel_size(), stride, o.padding(), o.ceil_mode(), o.count_include_pad());
  else if constexpr (D == 1)
    return squeeze(avg_pool2d(unsqueeze(input, -2), {1, o.kernel_size()[0]}, {1, stride[0]}, {0, o.padding()[0]},
                              o.ceil_mode(), o.count_include_pad()),
                   -2);
  // Row o of a dimension's matrix: 1 / divisor on the window's real cells; the divisor counts the
  // padding cells too with count_include_pad (not ceil_mode's cells past it), and is 1 under
  // divisor_override (applied once at the end).
  std::vector<std::vector<double>> rows(D);
  for (size_t i = 0; i < D; ++i) {
    const int64_t n = p.x.size(static_cast<int64_t>(i) + 1), k = o.kernel_size()[i], pad = o.padding()[i];
    rows[i].assign(static_cast<size_t>(outs[i] * n), 0.0);
    for (int64_t r = 0; r < outs[i]; ++r) {
      const int64_t start = r * stride[i] - pad, end = std::min(start + k, n + pad);
      const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(end, n);
      const double divisor = o.divisor_override() ? 1.0 : o.count_include_pad() ? double(end - start) : double(hi - lo);
      for (int64_t c = lo; c < hi; ++c) rows[i][r * n + c] = 1.0 / divisor;
    }
  }
  const double scale = o.divisor_override() ? 1.0 / static_cast<double>(*o.divisor_override()) : 1.0;
  return unplanes(separable_average(p.x, rows, outs, scale), p.batch);
}

template <size_t D>
std::tuple<Tensor, Tensor> adaptive_max_pool_with_indices(const Tensor& input, ExpandingArray<D> output_size) {
  const char* fn = D == 1 ? "adaptive_max_pool1d" : D == 2 ? "adaptive_max_pool2d" : "adaptive_max_pool3d";
  internal::check_floating(input, fn);
  Planes p = planes(fn, input, D);
  std::vector<Windows> windows;
  for (size_t i = 0; i < D; ++i) {
    LOCKSTEP_CHECK(output_size[i] > 0, fn, ": output_size ", output_size, " must be positive");
    windows.push_back(adaptive_windows(p.x.size(static_cast<int64_t>(i) + 1), output_size[i]));
  }
  auto [v, pos] = separable_max(p.x, windows, true);
  return {unplanes(v, p.batch), unplanes(pos, p.batch)};
}

template <size_t D>
Tensor adaptive_avg_pool(const Tensor& input, ExpandingArray<D> output_size) {
  const char* fn = D == 1 ? "adaptive_avg_pool1d" : D == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d";
  internal::check_floating(input, fn);
  Planes p = planes(fn, input, D);
  std::vector<std::vector<double>> rows(D);
  std::vector<int64_t> outs;
  for (size_t i = 0; i < D; ++i) {
    const int64_t n = p.x.size(static_cast<int64_t>(i) + 1), out = output_size[i];
    LOCKSTEP_CHECK(out > 0, fn, ": output_size ", output_size, " must be positive");
    outs.push_back(out);
    rows[i].assign(static_cast<size_t>(out * n), 0.0);
    for (int64_t r = 0; r < out; ++r) {
      const int64_t lo = r * n / out, hi = ((r + 1) * n + out - 1) / out;
      for (int64_t c = lo; c < hi; ++c) rows[i][r * n + c] = 1.0 / static_cast<double>(hi - lo);
    }
  }
  return unplanes(separable_average(p.x, rows, outs, 1.0), p.batch);
}

// PyTorch's composition: (sign(a) relu(|a|) * prod(k))^(1/p), a the average of x^p over each window.
template <size_t D>
Tensor lp_pool(const Tensor& input, const LPPoolOptions<D>& o) {
  const char* fn = D == 1 ? "lp_pool1d" : D == 2 ? "lp_pool2d" : "lp_pool3d";
  LOCKSTEP_CHECK(o.norm_type() != 0, fn, ": norm_type must be non-zero");
  Tensor a = avg_pool<D>(pow(input, o.norm_type()), AvgPoolOptions<D>(o.kernel_size())
                                                        .stride(default_stride<D>(o.stride(), o.kernel_size()))
                                                        .ceil_mode(o.ceil_mode()));
  double cells = 1;
  for (size_t i = 0; i < D; ++i) cells *= static_cast<double>(o.kernel_size()[i]);
  return lockstep::pow(lockstep::mul(lockstep::mul(lockstep::sign(a), lockstep::relu(lockstep::abs(a))), cells),
                       1.0 / o.norm_type());
}

// Fractional max pooling's windows along one dimension of one plane: PyTorch's generate_intervals,
// in the input's precision (float arithmetic for float32), so the same sample gives the same windows.
template <typename T>
std::vector<int64_t> fractional_starts(T sample, int64_t n, int64_t out, int64_t k) {
  std::vector<int64_t> starts(static_cast<size_t>(out));
  if (out > 1) {
    const T alpha = static_cast<T>(n - k) / static_cast<T>(out - 1);
    for (int64_t i = 0; i < out - 1; ++i)
      starts[i] = static_cast<int>((static_cast<T>(i) + sample) * alpha) - static_cast<int>(sample * alpha);
  }
  starts[out - 1] = n - k;
  return starts;
}

template <size_t D>
std::tuple<Tensor, Tensor> fractional_max_pool_with_indices(const Tensor& input, const FractionalMaxPoolOptions<D>& o) {
  const char* fn = D == 2 ? "fractional_max_pool2d" : "fractional_max_pool3d";
  internal::check_floating(input, fn);
  Planes p = planes(fn, input, D);
  LOCKSTEP_CHECK(o.output_size().has_value() != o.output_ratio().has_value(), fn,
                 ": exactly one of output_size and output_ratio must be given");
  std::array<int64_t, D> in{}, out{}, k{};
  for (size_t i = 0; i < D; ++i) {
    in[i] = p.x.size(static_cast<int64_t>(i) + 1), k[i] = o.kernel_size()[i];
    if (o.output_ratio()) {
      const double r = (*o.output_ratio())[i];
      LOCKSTEP_CHECK(r > 0 && r < 1, fn, ": output_ratio must be between 0 and 1, got ", *o.output_ratio());
      out[i] = static_cast<int64_t>(static_cast<double>(in[i]) * r);
    } else {
      out[i] = (*o.output_size())[i];
    }
    LOCKSTEP_CHECK(k[i] > 0 && out[i] > 0 && out[i] + k[i] - 1 <= in[i], fn, ": kernel_size ", o.kernel_size(),
                   " and output size ", ExpandingArray<D>(out), " do not fit the input ", input.shape(),
                   " (output + kernel - 1 must be at most the input size)");
  }
  const int64_t P = p.x.size(0), N = input.dim() == static_cast<int64_t>(D) + 2 ? input.size(0) : 1, C = P / N;
  Tensor samples = o._random_samples();
  if (!samples.defined()) samples = rand({N, C, static_cast<int64_t>(D)}, {input.dtype(), input.device()});
  LOCKSTEP_CHECK(samples.dim() == 3 && samples.size(0) == N && samples.size(1) == C &&
                     samples.size(2) == static_cast<int64_t>(D),
                 fn, ": _random_samples must be [", N, ", ", C, ", ", D, "], got ", samples.shape());
  const std::vector<double> u = to(to(samples, kFloat64), Device::cpu()).contiguous().to_vector<double>();
  Tensor v = p.x, pos = plane_positions(p.x);
  for (int64_t i = static_cast<int64_t>(D) - 1; i >= 0; --i) {
    // PyTorch's sample order: (w, h) for 2-D planes, (t, h, w) for 3-D volumes.
    const int64_t which = D == 2 ? 1 - i : i;
    std::vector<int64_t> taps(static_cast<size_t>(P * out[i] * k[i]));
    for (int64_t pl = 0; pl < P; ++pl) {
      const double sample = u[pl * D + which];
      const std::vector<int64_t> starts =
          input.dtype() == kFloat64 ? fractional_starts<double>(sample, in[i], out[i], k[i])
                                    : fractional_starts<float>(static_cast<float>(sample), in[i], out[i], k[i]);
      for (int64_t r = 0; r < out[i]; ++r)
        for (int64_t j = 0; j < k[i]; ++j) taps[(pl * out[i] + r) * k[i] + j] = starts[r] + j;
    }
    // [P, 1.., out * K, 1..] expanded to v's other sizes: each plane gathers its own windows.
    Shape s(static_cast<size_t>(v.dim()), 1), full = v.shape();
    s[0] = P, s[i + 1] = out[i] * k[i], full[i + 1] = out[i] * k[i];
    Tensor t = internal::contiguous(internal::expand(internal::reshape(to(tensor(taps), v.device()), s), full));
    max_stage(v, pos, i + 1, out[i], k[i], t);
  }
  return {unplanes(v, p.batch), unplanes(pos, p.batch)};
}

// Max unpooling: out[plane, indices] = x, zeros elsewhere; every input gets its position's gradient
// (a gather), as PyTorch's.
template <size_t D>
Tensor max_unpool(const Tensor& input, const Tensor& indices, const MaxUnpoolFuncOptions<D>& o) {
  namespace in = internal;
  const char* fn = D == 1 ? "max_unpool1d" : D == 2 ? "max_unpool2d" : "max_unpool3d";
  internal::check_floating(input, fn);
  LOCKSTEP_CHECK(indices.defined() && indices.dtype() == kInt64 && indices.shape() == input.shape(), fn,
                 ": Expected shape of indices to be same as that of the input tensor (", input.shape(),
                 ") and dtype int64, got ", indices.defined() ? indices.shape() : Shape{}, " ",
                 indices.defined() ? dtype_name(indices.dtype()) : "undefined");
  Planes p = planes(fn, input, D);
  const auto stride = default_stride<D>(o.stride(), o.kernel_size());
  Shape out(D);
  for (size_t i = 0; i < D; ++i)
    out[i] = (p.x.size(static_cast<int64_t>(i) + 1) - 1) * stride[i] - 2 * o.padding()[i] + o.kernel_size()[i];
  if (o.output_size()) {
    const std::vector<int64_t>& os = *o.output_size();
    LOCKSTEP_CHECK(os.size() >= D, fn, ": output_size must have at least ", D, " elements, got ", os.size());
    for (size_t i = 0; i < D; ++i) {
      const int64_t want = os[os.size() - D + i];
      LOCKSTEP_CHECK(want >= out[i] - stride[i] && want <= out[i] + stride[i], fn, ": invalid output_size ",
                     Shape(os.begin(), os.end()), " (dimension ", i, " must be between ", out[i] - stride[i], " and ",
                     out[i] + stride[i], ")");
      out[i] = want;
    }
  }
  const int64_t P = p.x.size(0), M = p.x.numel() / std::max<int64_t>(P, 1);
  int64_t L = 1;
  for (int64_t n : out) L *= n;
  Shape result = p.batch;
  result.insert(result.end(), out.begin(), out.end());
  if (input.numel() == 0) return zeros(result, {input.dtype(), input.device()});
  Tensor idx = in::reshape(in::contiguous(indices), {P, M});
  const int64_t lo = lockstep::min(idx).item<int64_t>(), hi = lockstep::max(idx).item<int64_t>();
  LOCKSTEP_CHECK(lo >= 0 && hi < L, fn, ": Found an invalid max index: ", lo < 0 ? lo : hi,
                 " (output volumes are of size ", out, ")");
  // Each plane's values written at its indices (tensor/scatter_ops.h's Assign row: a repeated index,
  // from overlapping windows, holds one value, written as it is), zeros elsewhere.
  Tensor y = zeros({P, L}, {input.dtype(), input.device()});
  in::scatter_(y, 1, idx, in::reshape(in::contiguous(p.x.detach()), {P, M}), Scatter::Assign);
  y = in::reshape(y, result);
  if (autograd::needs_grad({input}))
    y = autograd::record(fn, y, {input}, [idx, P, shape = input.shape()](const Tensor& grad) {
      return std::vector<Tensor>{in::reshape(in::gather(in::reshape(in::contiguous(grad), {P, -1}), 1, idx), shape)};
    });
  return y;
}

template std::tuple<Tensor, Tensor> max_pool_with_indices<1>(const Tensor&, const MaxPoolOptions<1>&);
template std::tuple<Tensor, Tensor> max_pool_with_indices<2>(const Tensor&, const MaxPoolOptions<2>&);
template std::tuple<Tensor, Tensor> max_pool_with_indices<3>(const Tensor&, const MaxPoolOptions<3>&);
template Tensor max_pool<1>(const Tensor&, const MaxPoolOptions<1>&);
template Tensor max_pool<2>(const Tensor&, const MaxPoolOptions<2>&);
template Tensor max_pool<3>(const Tensor&, const MaxPoolOptions<3>&);
template Tensor avg_pool<1>(const Tensor&, const AvgPoolOptions<1>&);
template Tensor avg_pool<2>(const Tensor&, const AvgPoolOptions<2>&);
template Tensor avg_pool<3>(const Tensor&, const AvgPoolOptions<3>&);
template std::tuple<Tensor, Tensor> adaptive_max_pool_with_indices<1>(const Tensor&, ExpandingArray<1>);
template std::tuple<Tensor, Tensor> adaptive_max_pool_with_indices<2>(const Tensor&, ExpandingArray<2>);
template std::tuple<Tensor, Tensor> adaptive_max_pool_with_indices<3>(const Tensor&, ExpandingArray<3>);
template Tensor adaptive_avg_pool<1>(const Tensor&, ExpandingArray<1>);
template Tensor adaptive_avg_pool<2>(const Tensor&, ExpandingArray<2>);
template Tensor adaptive_avg_pool<3>(const Tensor&, ExpandingArray<3>);
template Tensor lp_pool<1>(const Tensor&, const LPPoolOptions<1>&);
template Tensor lp_pool<2>(const Tensor&, const LPPoolOptions<2>&);
template Tensor lp_pool<3>(const Tensor&, const LPPoolOptions<3>&);
template std::tuple<Tensor, Tensor> fractional_max_pool_with_indices<2>(const Tensor&, const FractionalMaxPoolOptions<2>&);
template std::tuple<Tensor, Tensor> fractional_max_pool_with_indices<3>(const Tensor&, const FractionalMaxPoolOptions<3>&);
template Tensor max_unpool<1>(const Tensor&, const Tensor&, const MaxUnpoolFuncOptions<1>&);
template Tensor max_unpool<2>(const Tensor&, const Tensor&, const MaxUnpoolFuncOptions<2>&);
template Tensor max_unpool<3>(const Tensor&, const Tensor&, const MaxUnpoolFuncOptions<3>&);

}  // namespace lockstep::nn::functional
