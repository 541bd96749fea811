// nn::init: draws on the host and copies into the tensor, except normal_ and trunc_normal_ on a device
// tensor, which draw there (randn's Philox stream, tensor/factory.h).
#include "nn/init.h"

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "tensor/backend.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace lockstep::nn::init {

namespace {

// Overwrites t's values with src (drawn in float64 or float32, or on t's device) without recording.
Tensor& assign(Tensor& t, const Tensor& src) {
  NoGradGuard no_grad;
  internal::copy_(t, internal::to_device(internal::to_dtype(src, t.dtype()), t.device()));
  return t;
}

// Host draws in float64 for float64 tensors, float32 otherwise (as the layers' defaults).
Dtype draw_dtype(const Tensor& t) { return t.dtype() == kFloat64 ? kFloat64 : kFloat32; }

void check_float(const Tensor& t, const char* fn) {
  LOCKSTEP_CHECK(t.defined() && is_floating_point(t.dtype()), "nn::init::", fn, ": expected a floating-point tensor",
                 t.defined() ? ", got " : "", t.defined() ? dtype_name(t.dtype()) : std::string());
}

double fan(const Tensor& t, const std::string& mode, const char* fn) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  LOCKSTEP_CHECK(mode == "fan_in" || mode == "fan_out", "nn::init::", fn, ": mode must be 'fan_in' or 'fan_out', got '",
                 mode, "'");
  return static_cast<double>(mode == "fan_in" ? in : out);
}

}  // namespace

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "sigmoid" || nl.rfind("conv", 0) == 0) return 1;
  if (nl == "tanh") return 5.0 / 3;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1 + param * param));
  if (nl == "selu") return 3.0 / 4;
  fail("nn::init::calculate_gain: unsupported nonlinearity '", nl, "'");
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  LOCKSTEP_CHECK(t.defined() && t.dim() >= 2, "nn::init: fan in and fan out cannot be computed for a tensor with "
                 "fewer than 2 dimensions, got ", t.defined() ? t.shape() : Shape{});
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double fan_in_bound(const Tensor& weight) {
  int64_t in = calculate_fan_in_and_fan_out(weight).first;
  return in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0;
}

Tensor& uniform_(Tensor& t, double a, double b) {
  check_float(t, "uniform_");
  return assign(t, uniform(t.shape(), a, b, draw_dtype(t)));
}

Tensor& normal_(Tensor& t, double mean, double std) {
  check_float(t, "normal_");
  // Drawn where the backend draws (in t's dtype on a device); else the host stream in float32 or float64.
  if (supports(t.device(), Capability::kPhiloxRandom, t.dtype()))
    return assign(t, normal(mean, std, t.shape(), {t.dtype(), t.device()}));
  return assign(t, internal::add(internal::mul(randn(t.shape(), draw_dtype(t)), std), mean));
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b) {
  check_float(t, "trunc_normal_");
  LOCKSTEP_CHECK(a < b && std > 0, "nn::init::trunc_normal_: need a < b and std > 0, got a = ", a, ", b = ", b,
                 ", std = ", std);
  if (supports(t.device(), Capability::kPhiloxRandom, t.dtype())) {
    // On the device, in float32 (float64 for a float64 t): every value outside [a, b] is replaced by a
    // fresh draw until none is left, the host's rejection rule without a host draw or copy.
    const TensorOptions o{draw_dtype(t), t.device()};
    Tensor x = normal(mean, std, t.shape(), o);
    for (int tries = 0;; ++tries) {
      const Tensor outside = internal::binary(BinaryOp::LogicalOr, internal::binary_scalar(BinaryOp::Lt, x, a),
                                              internal::binary_scalar(BinaryOp::Gt, x, b));
      if (internal::sum(internal::to_dtype(outside, kFloat64)).item<double>() == 0) break;
      LOCKSTEP_CHECK(tries < 1000, "nn::init::trunc_normal_: [", a, ", ", b, "] is too far in the tail of N(", mean,
                     ", ", std, "^2)");
      x = internal::where(outside, normal(mean, std, t.shape(), o), x);
    }
    return assign(t, x);
  }
  std::vector<double> v(t.numel());
  size_t filled = 0;
  for (int tries = 0; filled < v.size(); ++tries) {
    LOCKSTEP_CHECK(tries < 1000, "nn::init::trunc_normal_: [", a, ", ", b, "] is too far in the tail of N(", mean,
                   ", ", std, "^2)");
    for (double x : randn({static_cast<int64_t>(v.size() - filled)}, kFloat64).to_vector<double>()) {
      x = mean + std * x;
      if (x >= a && x <= b) v[filled++] = x;
    }
  }
  return assign(t, tensor(v, t.shape()));
}

Tensor& constant_(Tensor& t, double value) {
  LOCKSTEP_CHECK(t.defined(), "nn::init::constant_: undefined tensor");
  NoGradGuard no_grad;
  internal::fill_(t, value);
  return t;
}
Tensor& ones_(Tensor& t) { return constant_(t, 1); }
Tensor& zeros_(Tensor& t) { return constant_(t, 0); }

Tensor& xavier_uniform_(Tensor& t, double gain) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  double bound = std::sqrt(3.0) * gain * std::sqrt(2.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  double bound = std::sqrt(3.0) * calculate_gain(nonlinearity, a) / std::sqrt(fan(t, mode, "kaiming_uniform_"));
  return uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  return normal_(t, 0, calculate_gain(nonlinearity, a) / std::sqrt(fan(t, mode, "kaiming_normal_")));
}

}  // namespace lockstep::nn::init
