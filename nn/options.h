// The one options style of nn/, as LibTorch's TORCH_ARG: each option is a private field with a
// chaining setter and a getter of the same name, so options read
//   Conv2dOptions(1, 32, 3).stride(1).padding(1)      // setters return *this
//   opts.stride()                                      // getters
// Required arguments go to the options' constructor; everything else has PyTorch's default.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>

#include "common/check.h"
#include "common/options.h"

namespace lockstep::nn {

// D sizes given as one number for all (3) or one per dimension ({3, 5}), as LibTorch's ExpandingArray
// (T double for ratios: FractionalMaxPool2dOptions's output_ratio).
template <size_t D, typename T = int64_t>
class ExpandingArray {
 public:
  ExpandingArray(T v) { values_.fill(v); }  // NOLINT: implicit, as kernel_size = 3
  ExpandingArray(std::initializer_list<T> list) {
    LOCKSTEP_CHECK(list.size() == D, "expected ", D, " sizes, got ", list.size());
    size_t i = 0;
    for (T v : list) values_[i++] = v;
  }
  ExpandingArray(const std::array<T, D>& a) : values_(a) {}
  T operator[](size_t i) const { return values_[i]; }
  const std::array<T, D>& values() const { return values_; }
  bool operator==(const ExpandingArray&) const = default;
  friend std::ostream& operator<<(std::ostream& os, const ExpandingArray& a) {
    if (D == 1) return os << a.values_[0];
    os << '(';
    for (size_t i = 0; i < D; ++i) os << (i ? ", " : "") << a.values_[i];
    return os << ')';
  }

 private:
  std::array<T, D> values_{};
};

// How a loss reduces its per-element values: torch's reduction='none' | 'mean' | 'sum'.
enum class Reduction { None, Mean, Sum };

}  // namespace lockstep::nn

namespace lockstep::nn {
inline constexpr Reduction kNone = Reduction::None;
inline constexpr Reduction kMean = Reduction::Mean;
inline constexpr Reduction kSum = Reduction::Sum;
}  // namespace lockstep::nn
