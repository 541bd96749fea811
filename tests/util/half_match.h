// 16-bit results against float64 references: inputs drawn already rounded to bfloat16 or float16 (so
// both sides start from the same values), and CHECK_HALF-style comparisons in units of the format's
// last place. The recurrent layers' 16-bit tests use these on the CPU (tests/nn/rnn_half_test.cpp) and
// on the GPU (tests/cuda/cuda_rnn_test.cpp).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/api.h"
#include "tests/util/tensor_match.h"

namespace lockstep::testing {

inline constexpr Dtype kHalves[] = {kBFloat16, kFloat16};

// One unit in the last place at 1 of bfloat16, float16 or float32 (the float32 kernels' tests use it too).
inline double ulp(Dtype dt) { return dt == kBFloat16 ? 0x1p-7 : dt == kFloat16 ? 0x1p-10 : 0x1p-23; }

// Normal values scaled by `scale` and rounded to dt, in float64 on the CPU (exact in every dtype here).
inline Tensor half_values(const Shape& s, Dtype dt, double scale = 1) {
  return internal::to_dtype(internal::to_dtype(internal::mul(randn(s, kFloat64), scale), dt), kFloat64);
}

// got (dt, on dev) against want (float64, CPU) within `ulps` units of dt, relative to each element and
// to want's largest magnitude (a sum over steps rounds at the scale of its largest terms).
inline void check_half(const Tensor& got, const Tensor& want, Dtype dt, double ulps, const std::string& what,
                       Device dev = Device::cpu()) {
  INFO(what, " ", dt);
  REQUIRE(got.defined());
  CHECK(got.dtype() == dt);
  CHECK(got.device() == dev);
  double scale = 0;
  for (double v : want.to_vector<double>()) scale = std::max(scale, std::abs(v));
  CHECK_MATCH(internal::to_dtype(internal::to_device(got, Device::cpu()), kFloat64), want, ulps * ulp(dt),
              ulps * ulp(dt) * scale);
}

// An op (a fused layer op, a cell) in dt on dev and in float64 on the CPU from the same 16-bit inputs
// (shapes and scales): the output and every input's gradient of sum(out * w), w drawn in dt.
inline void check_half_op(const std::function<Tensor(const std::vector<Tensor>&)>& op,
                          const std::vector<Shape>& shapes, const std::vector<double>& scales, Dtype dt, double ulps,
                          const std::string& what, Device dev = Device::cpu()) {
  std::vector<Tensor> ref, half;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor v = half_values(shapes[i], dt, scales[i]);
    half.push_back(internal::to_device(internal::to_dtype(v, dt), dev).set_requires_grad());
    ref.push_back(v.set_requires_grad());
  }
  Tensor out_h = op(half), out_r = op(ref);
  check_half(out_h, out_r, dt, ulps, what, dev);
  Tensor w = half_values(out_r.shape(), dt);
  sum(out_r * w).backward();
  sum(out_h * internal::to_device(internal::to_dtype(w, dt), dev)).backward();
  for (size_t i = 0; i < ref.size(); ++i)
    check_half(half[i].grad(), ref[i].grad(), dt, ulps, what + " grad " + std::to_string(i), dev);
}

}  // namespace lockstep::testing
