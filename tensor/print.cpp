// Printing: shapes as [30, 5] (as PyTorch's torch.Size prints), tensors with values and metadata.
#include <iomanip>
#include <sstream>

#include "tensor/ops.h"

namespace lockstep {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << shape_str(s); }

// Nested brackets, at most `kEdge` elements shown at each end of a long dimension.
static void print_values(std::ostream& os, const std::vector<double>& v, const Shape& s, size_t d, int64_t off,
                         bool integral) {
  constexpr int64_t kEdge = 3;
  if (s.empty()) {
    os << v[0];
    return;
  }
  int64_t stride = 1;
  for (size_t k = d + 1; k < s.size(); ++k) stride *= s[k];
  os << '[';
  for (int64_t i = 0; i < s[d]; ++i) {
    if (s[d] > 2 * kEdge && i == kEdge) {
      os << "..., ";
      i = s[d] - kEdge;
    }
    if (d + 1 == s.size()) {
      if (integral) os << static_cast<int64_t>(v[off + i]);
      else os << v[off + i];
    } else {
      print_values(os, v, s, d + 1, off + i * stride, integral);
    }
    if (i + 1 < s[d]) os << ", ";
  }
  os << ']';
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::ostringstream body;
  body << std::setprecision(4);
  print_values(body, t.to_vector<double>(), t.shape(), 0, 0, !is_floating_point(t.dtype()));
  return os << "tensor(" << body.str() << ", shape=" << t.shape() << ", dtype=" << t.dtype()
            << ", device=" << t.device() << ")";
}

}  // namespace lockstep
