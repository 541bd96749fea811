// F::interpolate and the Upsample modules. Each spatial dimension is resampled separately: per output
// position, a few input taps (int64 indices) with weights computed here on the host by PyTorch's coordinate
// rules (ATen's UpSample.h and UpSampleKernel.cpp), then y = sum_t x[..., idx_t, ...] * w_t in one pass of
// the backend's resampling kernel each way (composed from index_select where a backend has none). The
// weights are computed in float32 for float32 and narrower inputs and in float64 for float64, as PyTorch's
// opmath, so float32 results round where PyTorch's do.
#include "nn/upsampling.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace lockstep::nn {

const char* mode_name(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::Nearest: return "nearest";
    case InterpolateMode::NearestExact: return "nearest-exact";
    case InterpolateMode::Linear: return "linear";
    case InterpolateMode::Bilinear: return "bilinear";
    case InterpolateMode::Bicubic: return "bicubic";
    case InterpolateMode::Trilinear: return "trilinear";
    case InterpolateMode::Area: return "area";
  }
  return "?";
}

namespace {

// One dimension's resampling: output o reads input index[o * taps + t] with weight weight[o * taps + t]
// (weight empty: a single tap of weight 1, nearest).
using Taps = internal::ResampleTaps;

// ATen's compute_scales_value: the input step per output step.
template <typename T>
T scale_value(std::optional<double> scale, int64_t in, int64_t out) {
  return (scale && *scale > 0.) ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / out;
}

// ATen's area_pixel_compute_scale.
template <typename T>
T area_pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / (out - 1) : T(0);
  return scale_value<T>(scale, in, out);
}

// ATen's area_pixel_compute_source_index: pixel centres map to pixel centres, clamped at 0 but for cubic.
template <typename T>
T source_index(T scale, int64_t o, bool align_corners, bool cubic) {
  if (align_corners) return scale * o;
  const T src = scale * (o + static_cast<T>(0.5)) - static_cast<T>(0.5);
  return (!cubic && src < T(0)) ? T(0) : src;
}

// The source index computation runs in float32 whatever the dtype, as ATen's nearest_idx / nearest_exact_idx.
Taps nearest_taps(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  Taps r;
  r.index.resize(out);
  const float s = scale_value<float>(scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    if (!exact && out == in) {
      r.index[o] = o;
    } else if (!exact && out == 2 * in) {
      r.index[o] = o >> 1;
    } else {
      // (o + 0.5) * s is a double product rounded to float, as floorf's argument in ATen.
      const float src = exact ? static_cast<float>((o + 0.5) * s) : static_cast<float>(o) * s;
      r.index[o] = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    }
  }
  return r;
}

// ATen's compute_source_index_and_lambda: two taps; the same size copies, whatever scale_factor says.
template <typename T>
Taps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps r{2, std::vector<int64_t>(2 * out), std::vector<double>(2 * out)};
  const T ratio = area_pixel_scale<T>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i0 = o, i1 = o;
    T l1 = 0;
    if (out != in) {
      const T real = source_index<T>(ratio, o, align_corners, false);
      i0 = std::min(static_cast<int64_t>(real), in - 1);
      i1 = i0 + (i0 < in - 1 ? 1 : 0);
      l1 = std::min(std::max(real - static_cast<T>(i0), T(0)), T(1));
    }
    r.index[2 * o] = i0, r.index[2 * o + 1] = i1;
    r.weight[2 * o] = static_cast<T>(T(1) - l1), r.weight[2 * o + 1] = l1;
  }
  return r;
}

// Keys' cubic convolution kernel on |x| < 1 and 1 <= |x| < 2.
template <typename T>
T cubic1(T x, T a) {
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}
template <typename T>
T cubic2(T x, T a) {
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

// ATen's bicubic: taps floor(src) - 1 ... floor(src) + 2 clamped to the border, A = -0.75.
template <typename T>
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps r{4, std::vector<int64_t>(4 * out), std::vector<double>(4 * out)};
  const T ratio = area_pixel_scale<T>(in, out, align_corners, scale);
  const T a = -0.75;
  for (int64_t o = 0; o < out; ++o) {
    const T real = source_index<T>(ratio, o, align_corners, true);
    const int64_t i = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
    const T t = std::min(std::max(real - static_cast<T>(i), T(0)), T(1));
    const T u = T(1) - t;
    const T w[4] = {cubic2<T>(t + T(1), a), cubic1<T>(t, a), cubic1<T>(u, a), cubic2<T>(u + T(1), a)};
    for (int64_t j = 0; j < 4; ++j) {
      r.index[4 * o + j] = std::clamp<int64_t>(i - 1 + j, 0, in - 1);
      r.weight[4 * o + j] = w[j];
    }
  }
  return r;
}

// ATen's _compute_weights_aa: the triangle (bilinear) or Keys a = -0.5 (bicubic) filter, stretched by the
// downsampling factor, over the input pixels within its support, normalized to sum 1.
template <typename T>
Taps antialias_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_opt, bool cubic) {
  const T scale = area_pixel_scale<T>(in, out, align_corners, scale_opt);
  const int interp_size = cubic ? 4 : 2;
  const T support = (scale >= 1.0) ? (interp_size * 0.5) * scale : interp_size * 0.5;
  const T invscale = (scale >= 1.0) ? 1.0 / scale : 1.0;
  auto filter = [cubic](T x) -> T {
    x = std::abs(x);
    if (!cubic) return x < 1 ? T(1) - x : T(0);
    if (x < 1) return cubic1<T>(x, T(-0.5));
    return x < 2 ? cubic2<T>(x, T(-0.5)) : T(0);
  };
  std::vector<int64_t> xmin(out), xsize(out);
  int64_t taps = 1;
  for (int64_t o = 0; o < out; ++o) {
    const T center = scale * (o + 0.5);
    xmin[o] = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    xsize[o] = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin[o];
    taps = std::max(taps, xsize[o]);
  }
  // Outputs with fewer taps than the widest read their first pixel again with weight 0.
  Taps r{taps, std::vector<int64_t>(taps * out), std::vector<double>(taps * out, 0.0)};
  for (int64_t o = 0; o < out; ++o) {
    const T center = scale * (o + 0.5);
    std::vector<T> w(xsize[o]);
    T total = 0;
    for (int64_t j = 0; j < xsize[o]; ++j) total += w[j] = filter((j + xmin[o] - center + 0.5) * invscale);
    for (int64_t j = 0; j < taps; ++j) {
      r.index[taps * o + j] = xmin[o] + (j < xsize[o] ? j : 0);
      if (j < xsize[o]) r.weight[taps * o + j] = total != T(0) ? static_cast<T>(w[j] / total) : w[j];
    }
  }
  return r;
}

// adaptive_avg_pool's windows [floor(o in / out), ceil((o + 1) in / out)), each pixel weighted 1 / width.
template <typename T>
Taps area_taps(int64_t in, int64_t out) {
  int64_t taps = 1;
  auto start = [&](int64_t o) { return (o / out) * in + ((o % out) * in) / out; };
  auto end = [&](int64_t o) { return 1 + ((o + 1) * in - 1) / out; };
  for (int64_t o = 0; o < out; ++o) taps = std::max(taps, end(o) - start(o));
  Taps r{taps, std::vector<int64_t>(taps * out), std::vector<double>(taps * out, 0.0)};
  for (int64_t o = 0; o < out; ++o) {
    const int64_t s = start(o), width = end(o) - s;
    for (int64_t j = 0; j < taps; ++j) {
      r.index[taps * o + j] = s + (j < width ? j : 0);
      if (j < width) r.weight[taps * o + j] = T(1) / static_cast<T>(width);
    }
  }
  return r;
}

template <typename T>
Taps taps_for(InterpolateMode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale,
              bool antialias) {
  switch (mode) {
    case InterpolateMode::Nearest: return nearest_taps(in, out, scale, false);
    case InterpolateMode::NearestExact: return nearest_taps(in, out, scale, true);
    case InterpolateMode::Area: return area_taps<T>(in, out);
    case InterpolateMode::Bicubic:
      return antialias ? antialias_taps<T>(in, out, align_corners, scale, true)
                       : cubic_taps<T>(in, out, align_corners, scale);
    default:
      return antialias ? antialias_taps<T>(in, out, align_corners, scale, false)
                       : linear_taps<T>(in, out, align_corners, scale);
  }
}

// Whether the taps copy the input unchanged (the same size and each output reading its own pixel alone).
bool is_identity(const Taps& taps, int64_t in, int64_t out) {
  if (in != out) return false;
  for (int64_t o = 0; o < out; ++o) {
    double own = 0;  // the summed weight on pixel o; any other pixel must weigh 0
    for (int64_t t = 0; t < taps.taps; ++t) {
      const int64_t k = o * taps.taps + t;
      const double w = taps.weight.empty() ? 1.0 : taps.weight[k];
      if (taps.index[k] == o) own += w;
      else if (w != 0.0) return false;
    }
    if (own != 1.0) return false;
  }
  return true;
}

// x [..., in, ...] (dimension dim) -> [..., out, ...]: the backend's fused kernel each way where it has
// one, else composed from index_select, the weights and a sum over the taps.
Tensor resample(const Tensor& x, int64_t dim, const Taps& taps, int64_t out) {
  if (supports(x.device(), Capability::kResample, x.dtype())) {
    Tensor y = internal::resample(x.detach(), dim, out, taps);
    if (!autograd::needs_grad({x})) return y;
    return autograd::record("interpolate", y, {x}, [taps, dim, shape = x.shape()](const Tensor& g) {
      return std::vector<Tensor>{internal::resample_backward(g, shape, dim, taps)};
    });
  }
  Tensor picked = index_select(x, dim, tensor(taps.index, {out * taps.taps}, x.device()));  // [..., out * taps, ...]
  if (taps.weight.empty()) return picked;
  Shape split = x.shape();
  split[dim] = out;
  split.insert(split.begin() + dim + 1, taps.taps);  // [..., out, taps, ...]
  Shape weight_shape(split.size(), 1);
  weight_shape[dim] = out, weight_shape[dim + 1] = taps.taps;
  Tensor weight = tensor(taps.weight, weight_shape).to(x.dtype()).to(x.device());
  return sum(reshape(picked, split) * weight, dim + 1);
}

std::string join(const std::vector<double>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str() + ']';
}

// The spatial dimensions a mode needs (0: any of 1 to 3).
int64_t spatial_dims_of(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::Linear: return 1;
    case InterpolateMode::Bilinear:
    case InterpolateMode::Bicubic: return 2;
    case InterpolateMode::Trilinear: return 3;
    default: return 0;
  }
}

// Output sizes: size, or floor(input size * scale_factor); a single value serves every spatial dimension.
std::vector<int64_t> output_sizes(const Tensor& input, const functional::InterpolateFuncOptions& o) {
  const int64_t k = input.dim() - 2;
  const Shape spatial(input.shape().begin() + 2, input.shape().end());
  LOCKSTEP_CHECK(o.size() || o.scale_factor(), "interpolate: either size or scale_factor should be defined");
  LOCKSTEP_CHECK(!(o.size() && o.scale_factor()), "interpolate: only one of size or scale_factor should be defined");
  if (o.size()) {
    LOCKSTEP_CHECK(!o.recompute_scale_factor().value_or(false),
                   "interpolate: recompute_scale_factor is not meaningful with an explicit size.");
    std::vector<int64_t> size = *o.size();
    if (size.size() == 1) size.assign(k, size[0]);
    LOCKSTEP_CHECK(static_cast<int64_t>(size.size()) == k,
                   "interpolate: Input and output must have the same number of spatial dimensions, but got input "
                   "with spatial dimensions of ", spatial, " and output size of ", Shape(*o.size()),
                   ". Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, "
                   "...,oK) format.");
    return size;
  }
  std::vector<double> scale = *o.scale_factor();
  if (scale.size() == 1) scale.assign(k, scale[0]);
  LOCKSTEP_CHECK(static_cast<int64_t>(scale.size()) == k,
                 "interpolate: Input and scale_factor must have the same number of spatial dimensions, but got "
                 "input with spatial dimensions of ", spatial, " and scale_factor of shape ", join(*o.scale_factor()),
                 ". Please provide input tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, "
                 "...,sK) format.");
  std::vector<int64_t> size(k);
  for (int64_t d = 0; d < k; ++d) size[d] = static_cast<int64_t>(std::floor(static_cast<double>(spatial[d]) * scale[d]));
  return size;
}

// ATen's upsample_*_shape_check: "(D: .., H: .., W: ..)" for each side.
void check_positive(const Shape& spatial, const std::vector<int64_t>& out) {
  const int64_t k = static_cast<int64_t>(out.size());
  bool ok = true;
  for (int64_t d = 0; d < k; ++d) ok = ok && spatial[d] > 0 && out[d] > 0;
  if (ok) return;
  static const char* kNames[] = {"D", "H", "W"};
  auto describe = [&](auto&& sizes) {
    std::ostringstream os;
    os << '(';
    for (int64_t d = 0; d < k; ++d) os << (d ? ", " : "") << kNames[3 - k + d] << ": " << sizes[d];
    return os.str() + ')';
  };
  fail("interpolate: Input and output sizes should be greater than 0, but got input ", describe(spatial), " output ",
       describe(out));
}

}  // namespace

namespace functional {

Tensor interpolate(const Tensor& input, const InterpolateFuncOptions& o) {
  const InterpolateMode mode = o.mode();
  const bool interpolating = spatial_dims_of(mode) != 0;
  LOCKSTEP_CHECK(input.defined(), "interpolate: the input is undefined");
  LOCKSTEP_CHECK(interpolating || !o.align_corners(),
                 "interpolate: align_corners option can only be set with the interpolating modes: linear | bilinear "
                 "| bicubic | trilinear");
  LOCKSTEP_CHECK(input.dim() >= 3 && input.dim() <= 5, "interpolate: Input Error: Only 3D, 4D and 5D input Tensors "
                 "supported (got ", input.dim(), "D) for the modes: nearest | linear | bilinear | bicubic | trilinear | "
                 "area | nearest-exact (got ", mode, ")");
  LOCKSTEP_CHECK(!o.antialias() || ((mode == kBilinear || mode == kBicubic) && input.dim() == 4),
                 "interpolate: Anti-alias option is only supported for bilinear and bicubic modes (got ", mode,
                 " on ", input.dim(), "D input)");
  const int64_t k = input.dim() - 2, needs = spatial_dims_of(mode);
  LOCKSTEP_CHECK(!interpolating || needs == k, "interpolate: Got ", input.dim(), "D input, but ", mode, " mode needs ",
                 needs + 2, "D input");
  LOCKSTEP_CHECK(mode == kNearest || mode == kNearestExact || input.is_floating_point(), "interpolate: mode ", mode,
                 " expects a floating-point input, got ", input.dtype(), " ", input.shape());
  const std::vector<int64_t> out = output_sizes(input, o);
  const Shape spatial(input.shape().begin() + 2, input.shape().end());
  check_positive(spatial, out);
  const bool align_corners = o.align_corners().value_or(false);
  // The coordinate map uses scale_factor itself unless told to recompute it from the sizes.
  const bool keep_scale = o.scale_factor() && !o.recompute_scale_factor().value_or(false);
  // A 16-bit input is resampled in float32 and rounded once at the end, as PyTorch's kernels (which do
  // every dimension in one pass, in opmath) round it: a 16-bit copy between the passes would round twice.
  const bool widen = is_reduced_floating_point(input.dtype()) && k > 1;
  Tensor y = widen ? input.to(kFloat32) : input;
  bool resampled = false;
  for (int64_t d = 0; d < k; ++d) {
    std::optional<double> scale;
    if (keep_scale) scale = o.scale_factor()->size() == 1 ? (*o.scale_factor())[0] : (*o.scale_factor())[d];
    const Taps taps = input.dtype() == kFloat64
                          ? taps_for<double>(mode, spatial[d], out[d], align_corners, scale, o.antialias())
                          : taps_for<float>(mode, spatial[d], out[d], align_corners, scale, o.antialias());
    if (is_identity(taps, spatial[d], out[d])) continue;
    y = resample(y, d + 2, taps, out[d]);
    resampled = true;
  }
  // PyTorch returns a new tensor even when nothing moves.
  if (!resampled) return clone(input);
  return widen ? y.to(input.dtype()) : y;
}

// base [D * H * W, k + 1] (x fastest, then y, then z; a 1 last) @ theta^T [N, k + 1, k] -> [N, cells, k].
Tensor affine_grid(const Tensor& theta, const std::vector<int64_t>& size, bool align_corners) {
  LOCKSTEP_CHECK(theta.defined() && theta.is_floating_point(), "affine_grid: expected a floating-point theta");
  LOCKSTEP_CHECK(size.size() == 4 || size.size() == 5, "affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                 "affine transforms, respectively. Got size ", Shape(size.begin(), size.end()), ".");
  const int64_t k = static_cast<int64_t>(size.size()) - 2;  // spatial dimensions
  for (int64_t s : size)
    LOCKSTEP_CHECK(s > 0, "affine_grid: expected non-zero, positive output size. Got ", Shape(size.begin(), size.end()));
  const int64_t N = size[0];
  LOCKSTEP_CHECK(theta.dim() == 3 && theta.size(0) == N && theta.size(1) == k && theta.size(2) == k + 1,
                 "affine_grid: expected a batch of ", k, "D affine matrices of shape Nx", k, "x", k + 1, " for size ",
                 Shape(size.begin(), size.end()), ". Got ", theta.shape(), ".");
  // The coordinates along a dimension of n cells.
  auto line = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double c = n == 1 ? 0.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1);
      v[i] = align_corners ? c : c * static_cast<double>(n - 1) / static_cast<double>(n);
    }
    return v;
  };
  std::vector<int64_t> spatial(size.begin() + 2, size.end());  // [D,] H, W
  int64_t cells = 1;
  for (int64_t s : spatial) cells *= s;
  std::vector<double> base(static_cast<size_t>(cells * (k + 1)));
  std::vector<std::vector<double>> lines;
  for (int64_t s : spatial) lines.push_back(line(s));
  for (int64_t c = 0; c < cells; ++c) {
    int64_t rest = c;
    for (int64_t d = k - 1; d >= 0; --d) {  // spatial dim d (W last) gives coordinate k - 1 - d (x first)
      const int64_t n = spatial[d], i = rest % n;
      rest /= n;
      base[c * (k + 1) + (k - 1 - d)] = lines[d][i];
    }
    base[c * (k + 1) + k] = 1.0;
  }
  Tensor b = to(to(tensor(base, {cells, k + 1}), theta.dtype()), theta.device());
  Tensor grid = matmul(b, transpose(theta, 1, 2));  // [N, cells, k]
  Shape out{N};
  out.insert(out.end(), spatial.begin(), spatial.end());
  out.push_back(k);
  return reshape(grid, out);
}

}  // namespace functional

Tensor UpsampleImpl::forward(const Tensor& input) {
  return functional::interpolate(input, functional::InterpolateFuncOptions()
                                            .size(options.size())
                                            .scale_factor(options.scale_factor())
                                            .mode(options.mode())
                                            .align_corners(options.align_corners()));
}

Tensor UpsamplingNearest2dImpl::forward(const Tensor& input) {
  return functional::interpolate(
      input, functional::InterpolateFuncOptions().size(options.size()).scale_factor(options.scale_factor()));
}

Tensor UpsamplingBilinear2dImpl::forward(const Tensor& input) {
  return functional::interpolate(input, functional::InterpolateFuncOptions()
                                            .size(options.size())
                                            .scale_factor(options.scale_factor())
                                            .mode(kBilinear)
                                            .align_corners(true));
}

}  // namespace lockstep::nn
