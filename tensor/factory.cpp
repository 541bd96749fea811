// Tensor factories. Values are produced on the host and copied once to the target device, except
// uniform and normal draws (rand, uniform, randn, normal, and so dropout, bernoulli and nn::init's
// normal_ on a device tensor) for a device, which are made there.
#include "tensor/factory.h"

#include <cmath>
#include <cstring>

#include "tensor/backend.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace lockstep {

Tensor empty(const Shape& shape, TensorOptions o) { return Tensor(shape, o.dtype, o.device); }

Tensor full(const Shape& shape, double value, TensorOptions o) {
  Tensor t(shape, o.dtype, o.device);
  internal::fill_(t, value);
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return full(shape, 1.0, o); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {t.dtype(), t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {t.dtype(), t.device()}); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), {t.dtype(), t.device()}); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, {t.dtype(), t.device()}); }
Tensor rand_like(const Tensor& t) {
  LOCKSTEP_CHECK(t.defined(), "rand_like: the tensor is undefined");
  LOCKSTEP_CHECK(t.is_floating_point(), "rand_like: expected a floating-point tensor, got ", dtype_name(t.dtype()),
                 " ", t.shape());
  return rand(t.shape(), {t.dtype(), t.device()});
}
Tensor randn_like(const Tensor& t) {
  LOCKSTEP_CHECK(t.defined(), "randn_like: the tensor is undefined");
  LOCKSTEP_CHECK(t.is_floating_point(), "randn_like: expected a floating-point tensor, got ", dtype_name(t.dtype()),
                 " ", t.shape());
  return randn(t.shape(), {t.dtype(), t.device()});
}
Tensor Tensor::new_zeros(const Shape& shape) const { return zeros(shape, {dtype(), device()}); }
Tensor Tensor::new_ones(const Shape& shape) const { return ones(shape, {dtype(), device()}); }
Tensor Tensor::new_full(const Shape& shape, double value) const { return full(shape, value, {dtype(), device()}); }
Tensor Tensor::new_empty(const Shape& shape) const { return empty(shape, {dtype(), device()}); }

// Fills a host tensor of o.dtype with fn(i) for each element, then moves it to o.device.
template <typename Fn>
static Tensor generate(const Shape& shape, TensorOptions o, Fn&& fn) {
  Tensor host(shape, o.dtype, Device::cpu());
  dispatch(o.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = host.data<T>();
    for (int64_t i = 0, n = host.numel(); i < n; ++i) p[i] = static_cast<T>(fn(i));
  });
  return internal::to_device(host, o.device);
}

Tensor arange(int64_t end, TensorOptions o) { return detail::arange_integral(0, end, 1, o); }

namespace detail {

Tensor arange_integral(int64_t start, int64_t end, int64_t step, TensorOptions o) {
  LOCKSTEP_CHECK(step != 0, "arange: step must be nonzero");
  int64_t n = step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
  if (n < 0) n = 0;
  return generate({n}, o, [&](int64_t i) { return start + i * step; });
}

// PyTorch's: ceil((end - start) / step) values start + i * step, computed in double.
Tensor arange_floating(double start, double end, double step, TensorOptions o) {
  LOCKSTEP_CHECK(step != 0, "arange: step must be nonzero");
  LOCKSTEP_CHECK(std::isfinite(start) && std::isfinite(end), "arange: unsupported range: ", start, " -> ", end);
  LOCKSTEP_CHECK((step > 0 && end >= start) || (step < 0 && end <= start),
                 "arange: upper bound and larger bound inconsistent with step sign (start ", start, ", end ", end,
                 ", step ", step, ")");
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  return generate({n}, o, [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

}  // namespace detail

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  LOCKSTEP_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  // As PyTorch's kernel: the first half counted up from start, the second down from end, so both ends
  // are exact.
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  const int64_t half = steps > 1 ? steps / 2 : 1;  // one step: start, as PyTorch's
  return generate({steps}, o, [&](int64_t i) {
    return i < half ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - i - 1);
  });
}

Tensor logspace(double start, double end, int64_t steps, double base, TensorOptions o) {
  LOCKSTEP_CHECK(steps >= 0, "logspace: number of steps must be non-negative, got ", steps);
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  const int64_t half = steps > 1 ? steps / 2 : 1;
  return generate({steps}, o, [&](int64_t i) {
    return std::pow(base, i < half ? start + step * static_cast<double>(i)
                                   : end - step * static_cast<double>(steps - i - 1));
  });
}

Tensor eye(int64_t n, int64_t m, TensorOptions o) {
  if (m < 0) m = n;
  LOCKSTEP_CHECK(n >= 0, "eye: n must be greater or equal to 0, got ", n);
  return generate({n, m}, o, [&](int64_t i) { return i / m == i % m ? 1.0 : 0.0; });
}

template <typename T>
static Tensor from_values(const std::vector<T>& values, const Shape& shape, Device device, const char* op) {
  Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape;
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  LOCKSTEP_CHECK(n == static_cast<int64_t>(values.size()), op, ": ", values.size(), " values do not fill shape ", s);
  Tensor host(s, dtype_of<T>::value, Device::cpu());
  if (n) std::memcpy(host.data_ptr(), values.data(), n * sizeof(T));
  return internal::to_device(host, device);
}

Tensor tensor(const std::vector<float>& v, const Shape& s, Device d) { return from_values(v, s, d, "tensor"); }
Tensor tensor(const std::vector<double>& v, const Shape& s, Device d) { return from_values(v, s, d, "tensor"); }
Tensor tensor(const std::vector<int64_t>& v, const Shape& s, Device d) { return from_values(v, s, d, "tensor"); }

Tensor scalar_tensor(double value, TensorOptions o) { return full({}, value, o); }

Tensor rand(const Shape& shape, TensorOptions o) { return uniform(shape, 0.0, 1.0, o); }

Tensor uniform(const Shape& shape, double low, double high, TensorOptions o) {
  LOCKSTEP_CHECK(is_floating_point(o.dtype), "uniform: expected a floating-point dtype, got ", dtype_name(o.dtype));
  LOCKSTEP_CHECK(low <= high, "uniform: low ", low, " is above high ", high);
  Generator& g = default_generator();
  if (supports(o.device, Capability::kPhiloxRandom, o.dtype)) {
    // Drawn on the device, element by element (tensor/philox.h): no host draws, no copy; a 16-bit
    // tensor gets the float32 draws rounded.
    Tensor out(shape, o.dtype, o.device);
    backend_for(o.device).uniform(out, low, high, g.seed(), g.reserve_philox(static_cast<uint64_t>(out.numel())));
    return out;
  }
  if (o.dtype == kFloat32) {
    float lo = static_cast<float>(low), w = static_cast<float>(high - low);
    return generate(shape, o, [&](int64_t) { return lo + w * g.uniform_float(); });
  }
  return generate(shape, o, [&](int64_t) { return low + (high - low) * g.uniform_double(); });
}

// On a device, drawn there (tensor/philox.h's Box-Muller): no host draws, no copy; a 16-bit tensor gets
// the float32 draws rounded once, as PyTorch's. On the host, the Mersenne Twister's stream as before.
static Tensor draw_normal(const char* op, const Shape& shape, double mean, double std, TensorOptions o) {
  LOCKSTEP_CHECK(is_floating_point(o.dtype), op, ": expected a floating-point dtype, got ", dtype_name(o.dtype));
  LOCKSTEP_CHECK(std >= 0 && std::isfinite(std), op, ": std must be finite and non-negative, got ", std);
  Generator& g = default_generator();
  if (supports(o.device, Capability::kPhiloxRandom, o.dtype)) {
    Tensor out(shape, o.dtype, o.device);
    backend_for(o.device).normal(out, mean, std, g.seed(), g.reserve_philox(static_cast<uint64_t>(out.numel())));
    return out;
  }
  return generate(shape, o, [&](int64_t) { return mean + std * g.normal(); });
}

Tensor randn(const Shape& shape, TensorOptions o) { return draw_normal("randn", shape, 0.0, 1.0, o); }

Tensor normal(double mean, double std, const Shape& shape, TensorOptions o) {
  return draw_normal("normal", shape, mean, std, o);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o) {
  LOCKSTEP_CHECK(low < high, "randint: empty range [", low, ", ", high, ")");
  Generator& g = default_generator();
  uint64_t span = static_cast<uint64_t>(high - low);
  return generate(shape, o, [&](int64_t) { return low + static_cast<int64_t>(g.below(span)); });
}

Tensor randperm(int64_t n, TensorOptions o) {
  LOCKSTEP_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  std::vector<int64_t> p = default_generator().randperm(n);
  return generate({n}, o, [&](int64_t i) { return p[i]; });
}

}  // namespace lockstep
