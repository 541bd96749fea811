// F::pad and F::pad2d. Constant padding narrows (negative pads) and concatenates filled blocks, one padded
// dimension at a time; reflect, replicate and circular padding gather each padded dimension with
// index_select at the source index of every output position, so the backward pass (index_add) sums into an
// element the gradients of every output that copied it, as PyTorch's reflection/replication kernels do.
#include "nn/padding.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "autograd/functions.h"
#include "tensor/factory.h"

namespace lockstep::nn::functional {

namespace {

enum class Mode { Constant, Reflect, Replicate, Circular };
constexpr const char* kModeNames[] = {"constant", "reflect", "replicate", "circular"};

// Input [..., n] padded by (l, r) along d: l values first, then the input, then r values; negative pads crop.
Tensor constant_pad_dim(const Tensor& x, int64_t d, int64_t l, int64_t r, double value) {
  const int64_t n = x.size(d);
  LOCKSTEP_CHECK(n + l + r >= 0, "pad: The input size ", n, ", plus negative padding ", l, " and ", r,
                 " resulted in a negative output size, which is invalid. Check dimension ", d, " of your input.");
  Tensor out = x;
  if (l < 0 || r < 0)
    out = narrow(out, d, std::max<int64_t>(-l, 0), n + std::min<int64_t>(l, 0) + std::min<int64_t>(r, 0));
  if (l <= 0 && r <= 0) return out;
  auto fill = [&](int64_t k) {
    Shape s = out.shape();
    s[d] = k;
    return full(s, value, {out.dtype(), out.device()});
  };
  std::vector<Tensor> parts;
  if (l > 0) parts.push_back(fill(l));
  parts.push_back(out);
  if (r > 0) parts.push_back(fill(r));
  return cat(parts, d);
}

// The source position of output position i of a dimension of size n padded by (l, r). Negative pads of
// reflect and replicate shift the window as PyTorch's kernels do; circular padding crops first and wraps
// around what is left, as PyTorch's.
int64_t source_index(Mode mode, int64_t i, int64_t l, int64_t r, int64_t n) {
  const int64_t j = i - l;
  switch (mode) {
    case Mode::Reflect:
      return j < 0 ? -j : (j >= n ? 2 * (n - 1) - j : j);
    case Mode::Replicate:
      return std::clamp<int64_t>(j, 0, n - 1);
    default: {
      const int64_t kept = n + std::min<int64_t>(l, 0) + std::min<int64_t>(r, 0);
      const int64_t k = (i - std::max<int64_t>(l, 0)) % kept;
      return std::max<int64_t>(-l, 0) + (k < 0 ? k + kept : k);
    }
  }
}

std::string dims_and_sizes(const std::vector<int64_t>& sizes) {
  static constexpr const char* kNames[] = {"D", "H", "W"};
  std::ostringstream os;
  for (size_t k = 0; k < sizes.size(); ++k) os << (k ? ", " : "") << kNames[3 - sizes.size() + k] << ": " << sizes[k];
  return os.str();
}

// PyTorch's checks of reflect/replicate/circular padding of k = pad.size() / 2 trailing dimensions.
void check_indexed_pad(const Tensor& x, const std::vector<int64_t>& pad, Mode mode, double value) {
  const int64_t k = static_cast<int64_t>(pad.size()) / 2;
  LOCKSTEP_CHECK(k >= 1 && k <= 3 && (x.dim() == k + 1 || x.dim() == k + 2), "pad: Padding size ", pad.size(),
                 " is not supported for ", x.dim(),
                 "D input tensor.\nSupported combinations for non-constant padding:\n  - 2D or 3D input: padding size "
                 "= 2 (pads last dimension)\n  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n  - 4D or "
                 "5D input: padding size = 6 (pads last 3 dimensions)");
  LOCKSTEP_CHECK(value == 0, "pad: Padding mode \"", kModeNames[static_cast<int>(mode)],
                 "\" doesn't take in value argument");
  if (mode == Mode::Circular) {
    for (int64_t p = 0; p < k; ++p) {
      const int64_t n = x.size(x.dim() - 1 - p), l = pad[2 * p], r = pad[2 * p + 1];
      // Stricter than PyTorch's check (against n) where a pad crops: PyTorch's result is then undefined.
      const int64_t kept = n + std::min<int64_t>(l, 0) + std::min<int64_t>(r, 0);
      LOCKSTEP_CHECK(l <= n && r <= n && l <= std::max<int64_t>(kept, 0) && r <= std::max<int64_t>(kept, 0),
                     "pad: Padding value causes wrapping around more than once.");
      LOCKSTEP_CHECK(kept >= 0, "pad: Negative padding value is resulting in an empty dimension");
    }
    return;
  }
  for (int64_t d = x.dim() == k + 2 ? 1 : 0; d < x.dim(); ++d)
    LOCKSTEP_CHECK(x.size(d) > 0, "pad: Expected ", k + 1, "D or ", k + 2, "D (batch mode) tensor with possibly 0 ",
                   "batch size and other non-zero dimensions for input, but got: ", x.shape());
  std::vector<int64_t> in_sizes, out_sizes;
  bool fits = true;
  for (int64_t p = k - 1; p >= 0; --p) {
    const int64_t d = x.dim() - 1 - p, n = x.size(d), l = pad[2 * p], r = pad[2 * p + 1];
    LOCKSTEP_CHECK(mode != Mode::Reflect || (l < n && r < n), "pad: Argument #", 4 + 2 * p,
                   ": Padding size should be less than the corresponding input dimension, but got: padding (",
                   l, ", ", r, ") at dimension ", d, " of input ", x.shape());
    in_sizes.push_back(n);
    out_sizes.push_back(n + l + r);
    fits = fits && n + l + r >= 1;
  }
  LOCKSTEP_CHECK(fits, "pad: input (", dims_and_sizes(in_sizes), ") is too small. Calculated output ",
                 dims_and_sizes(out_sizes));
}

}  // namespace

Tensor pad(const Tensor& input, const PadFuncOptions& options) {
  LOCKSTEP_CHECK(input.defined(), "pad: got an undefined tensor");
  const std::vector<int64_t>& p = options.pad();
  LOCKSTEP_CHECK(p.size() % 2 == 0, "pad: Padding length must be divisible by 2");
  LOCKSTEP_CHECK(static_cast<int64_t>(p.size()) <= 2 * input.dim(),
                 "pad: Padding length should be less than or equal to two times the input dimension but got ",
                 "padding length ", p.size(), " and input of dimension ", input.dim());
  const auto mode = static_cast<Mode>(options.mode().index());
  Tensor out = input;
  if (mode == Mode::Constant) {
    for (size_t k = 0; k < p.size() / 2; ++k)
      out = constant_pad_dim(out, input.dim() - 1 - static_cast<int64_t>(k), p[2 * k], p[2 * k + 1], options.value());
    return out;
  }
  check_indexed_pad(input, p, mode, options.value());
  for (size_t k = 0; k < p.size() / 2; ++k) {
    const int64_t d = input.dim() - 1 - static_cast<int64_t>(k), n = input.size(d), l = p[2 * k], r = p[2 * k + 1];
    if (l == 0 && r == 0) continue;
    std::vector<int64_t> index(static_cast<size_t>(n + l + r));
    for (int64_t i = 0; i < n + l + r; ++i) index[static_cast<size_t>(i)] = source_index(mode, i, l, r, n);
    // out: [..., n, ...] -> [..., n + l + r, ...] along d
    out = index_select(out, d, tensor(index, {n + l + r}, input.device()));
  }
  return out;
}

Tensor pad2d(const Tensor& x, int64_t left, int64_t right, int64_t top, int64_t bottom, double value) {
  LOCKSTEP_CHECK(x.defined() && x.dim() >= 2, "pad2d: expected a tensor of at least 2 dimensions, got ",
                 x.defined() ? x.shape() : Shape{});
  LOCKSTEP_CHECK(left >= 0 && right >= 0 && top >= 0 && bottom >= 0, "pad2d: padding must be non-negative, got (", left,
                 ", ", right, ", ", top, ", ", bottom, ")");
  return pad(x, PadFuncOptions({left, right, top, bottom}).value(value));
}

}  // namespace lockstep::nn::functional
