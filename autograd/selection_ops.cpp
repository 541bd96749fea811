// Ops whose output size depends on the values: nonzero / argwhere, masked_select, masked_scatter,
// unique (_unique2), unique_consecutive, bincount and histc. Each reads what sizes its output on the
// host (PyTorch's synchronize there too), then works on the device with the kernels; masked_select and
// masked_scatter are index_select and scatter underneath, which carry their gradients.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

namespace in = internal;

namespace {

// Which elements of a are nonzero, row-major, on the host.
std::vector<uint8_t> nonzero_flags(const Tensor& a) { return in::to_dtype(a.detach(), kBool).to_vector<uint8_t>(); }

Tensor int64_on(const std::vector<int64_t>& v, const Shape& shape, Device device) {
  Tensor t = zeros(shape, TensorOptions(kInt64));
  if (!v.empty()) std::copy(v.begin(), v.end(), t.data<int64_t>());
  return in::to_device(t, device);
}

// The flat positions of a's nonzero elements, int64 [n] on a's device.
Tensor true_positions(const Tensor& a) {
  const std::vector<uint8_t> flags = nonzero_flags(a);
  std::vector<int64_t> pos;
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) pos.push_back(static_cast<int64_t>(i));
  return int64_on(pos, {static_cast<int64_t>(pos.size())}, a.device());
}

void check_mask(const Tensor& a, const Tensor& mask, const char* op) {
  LOCKSTEP_CHECK(a.defined() && mask.defined(), op, ": got an undefined tensor");
  LOCKSTEP_CHECK(mask.dtype() == kBool, op, ": expected BoolTensor for mask, got ", mask.dtype());
  LOCKSTEP_CHECK(mask.device() == a.device(), op, ": mask on ", mask.device(), " but tensor on ", a.device());
}

}  // namespace

Tensor nonzero(const Tensor& a) {
  LOCKSTEP_CHECK(a.defined(), "nonzero: got an undefined tensor");
  const std::vector<uint8_t> flags = nonzero_flags(a);
  const int64_t ndim = a.dim();
  std::vector<int64_t> out;
  for (size_t i = 0; i < flags.size(); ++i) {
    if (!flags[i]) continue;
    const size_t at = out.size();
    out.resize(at + ndim);
    int64_t rest = static_cast<int64_t>(i);
    for (int64_t d = ndim - 1; d >= 0; --d) {  // row-major coordinates, last dimension fastest
      out[at + d] = rest % a.shape()[d];
      rest /= a.shape()[d];
    }
  }
  const int64_t n = std::count_if(flags.begin(), flags.end(), [](uint8_t f) { return f != 0; });
  return int64_on(out, {n, ndim}, a.device());
}

Tensor argwhere(const Tensor& a) { return nonzero(a); }

Tensor masked_select(const Tensor& a, const Tensor& mask) {
  check_mask(a, mask, "masked_select");
  const Shape s = in::broadcast_shapes(a.shape(), mask.shape(), "masked_select");
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  Tensor pos = true_positions(in::expand(mask, s));
  return index_select(reshape(expand(a, s), {n}), 0, pos);
}

Tensor masked_scatter(const Tensor& a, const Tensor& mask, const Tensor& source) {
  check_mask(a, mask, "masked_scatter");
  LOCKSTEP_CHECK(source.defined(), "masked_scatter: the source is undefined");
  LOCKSTEP_CHECK(source.dtype() == a.dtype(), "masked_scatter: expected self and source to have same dtypes but got ",
                 a.dtype(), " and ", source.dtype());
  LOCKSTEP_CHECK(in::broadcast_shapes(a.shape(), mask.shape(), "masked_scatter") == a.shape(),
                 "masked_scatter: the mask ", mask.shape(), " does not broadcast to the tensor's shape ", a.shape());
  Tensor pos = true_positions(in::expand(mask, a.shape()));
  const int64_t n = pos.numel();
  LOCKSTEP_CHECK(source.numel() >= n, "masked_scatter: Number of elements of source < number of ones in mask (",
                 source.numel(), " < ", n, ")");
  Tensor src = narrow(reshape(source, {source.numel()}), 0, 0, n);
  return reshape(scatter(reshape(a, {a.numel()}), 0, pos, src), a.shape());
}

namespace {

// unique and unique_consecutive over the flattened elements: runs of equal values (after a stable
// sort, with `sorted`) become one value each. NaN equals nothing, so each NaN is its own value, as
// PyTorch's. Values not asked for come back as empty int64 tensors, as PyTorch's.
std::tuple<Tensor, Tensor, Tensor> unique_runs(const Tensor& a, bool sorted, bool return_inverse,
                                               bool return_counts, const char* op) {
  LOCKSTEP_CHECK(a.defined(), op, ": got an undefined tensor");
  const int64_t n = a.numel();
  Tensor v = in::contiguous(in::reshape(a.detach(), {n})), perm;
  if (sorted && n > 0) std::tie(v, perm) = in::sort(v, 0, false);
  // starts[i]: element i begins a run (the first, and each one unequal to the one before).
  std::vector<uint8_t> starts(n, 1);
  if (n > 1) {
    std::vector<uint8_t> differs =
        in::binary(BinaryOp::Ne, in::narrow(v, 0, 1, n - 1), in::narrow(v, 0, 0, n - 1)).to_vector<uint8_t>();
    std::copy(differs.begin(), differs.end(), starts.begin() + 1);
  }
  std::vector<int64_t> first, group(n), counts;
  for (int64_t i = 0; i < n; ++i) {
    if (starts[i]) {
      first.push_back(i);
      counts.push_back(0);
    }
    group[i] = static_cast<int64_t>(first.size()) - 1;
    ++counts.back();
  }
  const int64_t u = static_cast<int64_t>(first.size());
  Tensor values = in::index_select(v, 0, int64_on(first, {u}, a.device()));
  Tensor inverse = int64_on({}, {0}, a.device()), count = int64_on({}, {0}, a.device());
  if (return_inverse) {
    std::vector<int64_t> inv(n);
    if (perm.defined()) {
      const std::vector<int64_t> p = perm.to_vector<int64_t>();
      for (int64_t i = 0; i < n; ++i) inv[p[i]] = group[i];
    } else {
      inv = group;
    }
    inverse = int64_on(inv, a.shape(), a.device());
  }
  if (return_counts) count = int64_on(counts, {u}, a.device());
  return {values, inverse, count};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> _unique2(const Tensor& a, bool sorted, bool return_inverse, bool return_counts) {
  // Sorted either way: PyTorch's CPU unique, too, returns sorted values when sorted=false is asked.
  (void)sorted;
  return unique_runs(a, true, return_inverse, return_counts, "unique");
}

std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& a, bool sorted, bool return_inverse, bool return_counts) {
  return _unique2(a, sorted, return_inverse, return_counts);
}

std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& a, bool return_inverse, bool return_counts,
                                                      std::optional<int64_t> dim) {
  LOCKSTEP_CHECK(!dim, "unique_consecutive: dim = ", dim.value_or(0), " is not supported (only the flattened "
                 "elements)");
  return unique_runs(a, false, return_inverse, return_counts, "unique_consecutive");
}

Tensor bincount(const Tensor& a, const Tensor& weights, int64_t minlength) {
  LOCKSTEP_CHECK(a.defined(), "bincount: got an undefined tensor");
  LOCKSTEP_CHECK(minlength >= 0, "bincount: minlength should be >= 0, got ", minlength);
  LOCKSTEP_CHECK(a.dim() == 1 && !is_floating_point(a.dtype()) && a.dtype() != kBool,
                 "bincount only supports 1-d non-negative integral inputs (got ", a.dtype(), " ", a.shape(), ")");
  const std::vector<int64_t> v = a.detach().to_vector<int64_t>();
  int64_t length = minlength;
  for (int64_t x : v) {
    LOCKSTEP_CHECK(x >= 0, "bincount only supports 1-d non-negative integral inputs (got the value ", x, ")");
    length = std::max(length, x + 1);
  }
  Tensor idx = in::to_dtype(a.detach(), kInt64);
  if (!weights.defined()) {
    Tensor out = zeros({length}, {kInt64, a.device()});
    in::scatter_add_(out, 0, idx, in::expand(ones({}, {kInt64, a.device()}), idx.shape()));
    return out;
  }
  LOCKSTEP_CHECK(weights.dim() == 1 && weights.numel() == a.numel(), "bincount: weights should be 1-d and have the "
                 "same length as input (weights ", weights.shape(), ", input ", a.shape(), ")");
  LOCKSTEP_CHECK(weights.device() == a.device(), "bincount: weights on ", weights.device(), " but input on ",
                 a.device());
  // float32 weights count in float32; every other dtype in float64, as PyTorch's.
  const Dtype dt = weights.dtype() == kFloat32 ? kFloat32 : kFloat64;
  Tensor out = zeros({length}, {dt, a.device()});
  in::scatter_add_(out, 0, idx, in::to_dtype(weights.detach(), dt));
  return out;
}

namespace {

// histc's bin of each value in [lo, hi] (hi itself in the last bin), computed in C as PyTorch computes
// it in the input's dtype; other values (NaN too) count nowhere.
template <typename C>
std::vector<double> histogram(const std::vector<double>& xs, int64_t bins, C lo, C hi) {
  std::vector<double> counts(bins, 0.0);
  for (double xd : xs) {
    const C x = static_cast<C>(xd);
    if (!(x >= lo && x <= hi)) continue;
    const int64_t b = static_cast<int64_t>((x - lo) * static_cast<C>(bins) / (hi - lo));
    counts[std::min(b, bins - 1)] += 1;
  }
  return counts;
}

}  // namespace

Tensor histc(const Tensor& a, int64_t bins, double min, double max) {
  LOCKSTEP_CHECK(a.defined(), "histc: got an undefined tensor");
  LOCKSTEP_CHECK(a.is_floating_point(), "histc: expected a floating tensor, got ", a.dtype());
  LOCKSTEP_CHECK(bins > 0, "histc: bins must be > 0, got ", bins);
  LOCKSTEP_CHECK(!(max < min), "histc: max must be larger than min (min ", min, ", max ", max, ")");
  const std::vector<double> xs = a.detach().to_vector<double>();
  if (min == max && !xs.empty()) {  // the data's range (NaN if any value is, refused below)
    min = max = xs[0];
    for (double x : xs) {
      min = std::isnan(x) || x < min ? x : min;
      max = std::isnan(x) || x > max ? x : max;
      if (std::isnan(x)) break;
    }
  }
  if (min == max) {
    min -= 1;
    max += 1;
  }
  LOCKSTEP_CHECK(std::isfinite(min) && std::isfinite(max), "histc: range of [", min, ", ", max, "] is not finite");
  const std::vector<double> counts = a.dtype() == kFloat64 ? histogram<double>(xs, bins, min, max)
                                                           : histogram<float>(xs, bins, float(min), float(max));
  Tensor out = tensor(counts, {bins});
  return in::to_device(in::to_dtype(out, a.dtype()), a.device());
}

}  // namespace lockstep
