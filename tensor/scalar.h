// Scalar: one number, what Tensor::item() returns without a type (LibTorch's c10::Scalar): an integer
// for integral and bool tensors, a double otherwise. It converts to double where a number is expected,
// so `x.mm(w) + b.item()` and `std::cout << t.item()` read as in LibTorch.
#pragma once

#include <cstdint>
#include <ostream>

namespace lockstep {

class Scalar {
 public:
  Scalar(double v) : d_(v), i_(static_cast<int64_t>(v)), integral_(false) {}  // NOLINT: implicit, as c10's
  Scalar(int64_t v) : d_(static_cast<double>(v)), i_(v), integral_(true) {}   // NOLINT
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
