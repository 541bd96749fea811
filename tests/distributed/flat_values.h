// What the flat-collective tests (all_gather_into_tensor, reduce_scatter_tensor) send and must get back,
// worked out from the definitions, with no reduction code of lockstep's: rank r holds value(op, r, i) at
// element i of its whole input (reduce-scatter) or of its chunk (all-gather). The values are small
// integers (-5..5; 2, -1 or 1 for PRODUCT), so every sum, product, minimum and maximum over up to 4
// ranks is exact in every dtype, bfloat16 and float16 included; AVG is the exact sum divided once, in
// the dtype's compute type (float32 for the 16-bit floats), as the backends document.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "distributed/work.h"
#include "tensor/dtype.h"
#include "tensor/factory.h"

namespace lockstep::testing::flat {

using dist::ReduceOp;

inline double value(ReduceOp op, int rank, int64_t i) {
  if (op == ReduceOp::PRODUCT) {
    const int64_t k = (i + rank) % 3;
    return k == 0 ? 2 : k == 1 ? -1 : 1;
  }
  return static_cast<double>((i * 7 + rank * 3) % 11) - 5;
}

// op over ranks 0..world-1 of value(op, r, i), as a T.
template <typename T>
T expected(ReduceOp op, int world, int64_t i) {
  double acc = value(op, 0, i);
  for (int r = 1; r < world; ++r) {
    const double v = value(op, r, i);
    switch (op) {
      case ReduceOp::SUM:
      case ReduceOp::AVG: acc += v; break;
      case ReduceOp::PRODUCT: acc *= v; break;
      case ReduceOp::MIN: acc = std::min(acc, v); break;
      case ReduceOp::MAX: acc = std::max(acc, v); break;
    }
  }
  if (op != ReduceOp::AVG) return static_cast<T>(acc);
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<int64_t>(acc) / world);  // truncating, as torch's integer AVG
  } else {
    using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;
    return static_cast<T>(static_cast<Compute>(acc) / static_cast<Compute>(world));
  }
}

// A CPU tensor of `n` elements: element j is value(op, rank, j + base).
inline Tensor input(Dtype dtype, ReduceOp op, int rank, int64_t n, int64_t base = 0) {
  Tensor t = empty({n}, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.data_ptr());
    for (int64_t j = 0; j < n; ++j) p[j] = static_cast<T>(value(op, rank, j + base));
  });
  return t;
}

// The first element of CPU tensor `t` that is not want(i) (compared as doubles), described; "" when none.
template <typename Want>
std::string first_wrong(const Tensor& t, Want&& want) {
  return dispatch(t.dtype(), [&](auto tag) -> std::string {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double got = static_cast<double>(p[i]), expect = static_cast<double>(want(T{}, i));
      if (!(got == expect)) {
        return "element " + std::to_string(i) + " of " + std::to_string(t.numel()) + " is " + std::to_string(got) +
               ", expected " + std::to_string(expect);
      }
    }
    return "";
  });
}

// Where reduce_scatter's output (chunk `rank` of n elements) differs from the reduction; "" when nowhere.
inline std::string check_reduced(const Tensor& out, ReduceOp op, int world, int rank) {
  const int64_t n = out.numel();
  return first_wrong(out, [&](auto t, int64_t i) { return expected<decltype(t)>(op, world, rank * n + i); });
}

// Where all_gather's output (world chunks of n elements, rank r's chunk value(SUM, r, j)) is wrong.
inline std::string check_gathered(const Tensor& out, int world) {
  const int64_t n = out.numel() / world;
  return first_wrong(out, [&](auto t, int64_t i) {
    return static_cast<decltype(t)>(value(ReduceOp::SUM, static_cast<int>(i / n), i % n));
  });
}

}  // namespace lockstep::testing::flat
