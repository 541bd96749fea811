// LOCKSTEP_CHECK: the one way lockstep reports bad input. It throws lockstep::Error whose message
// names the operation and the offending values, e.g.
//   LOCKSTEP_CHECK(a.size(1) == b.size(0), "matmul: ", a.shape(), " x ", b.shape(), ": inner dimensions differ");
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace lockstep {

// Every error lockstep raises on bad input or a failed system call.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename T>
void stream_one(std::ostringstream& os, const T& v) {
  os << v;
}
// Vectors print as [a, b, c] so shapes read the way PyTorch prints them.
template <typename T>
void stream_one(std::ostringstream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
}
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (stream_one(os, args), ...);
  return os.str();
}
}  // namespace detail

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::str_cat(args...));
}

}  // namespace lockstep

#define LOCKSTEP_CHECK(cond, ...)                      \
  do {                                                 \
    if (!(cond)) ::lockstep::fail(__VA_ARGS__);        \
  } while (0)
