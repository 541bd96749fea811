// Scalar: one number, what Tensor::item() returns without a type (LibTorch's c10::Scalar): an integer
// for integral and bool tensors, a double otherwise. It converts to double where a number is expected,
// so `x.mm(w) + b.item()` and `std::cout << t.item()` read as in LibTorch.
#pragma once

#include <cstdint>
#include <ostream>
#include <type_traits>

namespace lockstep {

class Scalar {
 public:
  // Any integer (bool included, as 0 or 1) or floating-point number, implicitly, as c10's.
  template <typename T>
    requires std::is_integral_v<T>
  Scalar(T v) : d_(static_cast<double>(v)), i_(static_cast<int64_t>(v)), integral_(true) {}  // NOLINT
  template <typename T>
    requires std::is_floating_point_v<T>
  Scalar(T v) : d_(static_cast<double>(v)), i_(0), integral_(false) {}  // NOLINT
  bool isIntegral() const { return integral_; }
  bool isFloatingPoint() const { return !integral_; }
  double toDouble() const { return d_; }
  float toFloat() const { return static_cast<float>(d_); }
  int64_t toLong() const { return integral_ ? i_ : static_cast<int64_t>(d_); }
  template <typename T> T to() const { return integral_ ? static_cast<T>(i_) : static_cast<T>(d_); }
  operator double() const { return d_; }  // NOLINT: a Scalar reads as the number it holds
  friend std::ostream& operator<<(std::ostream& os, const Scalar& s) {
    return s.integral_ ? os << s.i_ : os << s.d_;
  }

 private:
  double d_;
  int64_t i_;
  bool integral_;
};

}  // namespace lockstep
