// Tensor factories, as torch.zeros / torch.tensor / torch.randn. Random draws come from the default
// generator (tensor/generator.h), seeded by manual_seed. They are drawn on the host, except
// rand/uniform/randn/normal for a device, which are drawn there by Philox (tensor/philox.h), as
// torch.cuda draws: a seed then gives the same values run after run, but not the same values on the
// CPU and a GPU.
#pragma once

#include <type_traits>

#include <initializer_list>
#include <vector>

#include "tensor/tensor.h"

namespace lockstep {

struct TensorOptions {
  Dtype dtype = kFloat32;
  Device device = Device::cpu();
  TensorOptions() = default;
  TensorOptions(Dtype d) : dtype(d) {}
  TensorOptions(Device d) : device(d) {}
  TensorOptions(Dtype d, Device dev) : dtype(d), device(dev) {}
};

Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
// t's shape, dtype and device, as torch.zeros_like(t) ...; rand_like and randn_like need a
// floating-point t (as PyTorch's) and draw from the default generator. For another shape with t's dtype
// and device: t.new_zeros(shape), t.new_ones, t.new_full, t.new_empty.
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
// [0, end) or [start, end) with a step, as torch.arange: int64 when every bound is an integer, float32
// when one is floating (arange(0.0, 1.0, 0.3) is [0, 0.3, 0.6, 0.9]), unless opts says otherwise.
Tensor arange(int64_t end, TensorOptions opts = TensorOptions(kInt64));
namespace detail {
Tensor arange_integral(int64_t start, int64_t end, int64_t step, TensorOptions opts);
Tensor arange_floating(double start, double end, double step, TensorOptions opts);
}  // namespace detail
template <typename S, typename E, typename St = int64_t>
  requires std::is_arithmetic_v<S> && std::is_arithmetic_v<E> && std::is_arithmetic_v<St>
Tensor arange(S start, E end, St step = 1,
              TensorOptions opts = TensorOptions(std::is_floating_point_v<S> || std::is_floating_point_v<E> ||
                                                         std::is_floating_point_v<St>
                                                     ? kFloat32
                                                     : kInt64)) {
  if constexpr (std::is_integral_v<S> && std::is_integral_v<E> && std::is_integral_v<St>)
    return detail::arange_integral(start, end, step, opts);
  else
    return detail::arange_floating(static_cast<double>(start), static_cast<double>(end), static_cast<double>(step),
                                   opts);
}
// `steps` values from start to end inclusive, evenly spaced (torch.linspace: float32 unless opts says).
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
// base ** linspace(start, end, steps).
Tensor logspace(double start, double end, int64_t steps, double base = 10.0, TensorOptions opts = {});
// The n x m identity (m = n when negative).
Tensor eye(int64_t n, int64_t m = -1, TensorOptions opts = {});

// From host values with a shape (numel must match); `tensor({1, 2, 3})` is 1-D.
Tensor tensor(const std::vector<float>& values, const Shape& shape = {}, Device device = Device::cpu());
Tensor tensor(const std::vector<double>& values, const Shape& shape = {}, Device device = Device::cpu());
Tensor tensor(const std::vector<int64_t>& values, const Shape& shape = {}, Device device = Device::cpu());
// Brace lists pick the dtype from the literals: tensor({1.f, 2.f}) is float32, tensor({1.0}) float64.
inline Tensor tensor(std::initializer_list<float> v, const Shape& s = {}, Device d = Device::cpu()) {
  return tensor(std::vector<float>(v), s, d);
}
inline Tensor tensor(std::initializer_list<double> v, const Shape& s = {}, Device d = Device::cpu()) {
  return tensor(std::vector<double>(v), s, d);
}
inline Tensor tensor(std::initializer_list<int64_t> v, const Shape& s = {}, Device d = Device::cpu()) {
  return tensor(std::vector<int64_t>(v), s, d);
}
// A one-element tensor of shape [].
Tensor scalar_tensor(double value, TensorOptions opts = {});

Tensor rand(const Shape& shape, TensorOptions opts = {});   // uniform [0, 1)
Tensor randn(const Shape& shape, TensorOptions opts = {});  // standard normal
// mean + std * randn, as torch.normal(mean, std, size) (std >= 0).
Tensor normal(double mean, double std, const Shape& shape, TensorOptions opts = {});
Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts = {});
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = TensorOptions(kInt64));
Tensor randperm(int64_t n, TensorOptions opts = TensorOptions(kInt64));

}  // namespace lockstep
