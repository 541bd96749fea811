// The CPU backend: lockstep's kernels on host memory, through Eigen maps over the storage (no
// copies). Single-threaded: data parallelism comes from processes, one per core or GPU.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "tensor/backend.h"
#include "tensor/cpu/gemm.h"
#include "tensor/int_div.h"
#include "tensor/tensor.h"

namespace lockstep {
namespace {

// torch.max and torch.maximum propagate NaN: the result is NaN when either operand is (std::max
// returns its first argument when the comparison is false, so it would drop a NaN in second place).
template <typename T>
inline T max_propagating_nan(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    if (y != y) return y;
  }
  return x < y ? y : x;
}

template <typename T>
using MatMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned>;
template <typename T>
using ConstMatMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned>;
template <typename T>
using ArrMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>, Eigen::Unaligned>;
template <typename T>
using ConstArrMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, Eigen::Unaligned>;

template <typename T>
ArrMap<T> arr(Tensor& t) { return ArrMap<T>(t.data<T>(), t.numel()); }
template <typename T>
ConstArrMap<T> carr(const Tensor& t) { return ConstArrMap<T>(t.data<T>(), t.numel()); }

template <typename T>
struct BinaryFn {
  BinaryOp op;
  T operator()(T x, T y) const {
    switch (op) {
      case BinaryOp::Add: return x + y;
      case BinaryOp::Sub: return x - y;
      case BinaryOp::Mul: return x * y;
      case BinaryOp::Div:
        if constexpr (std::is_integral_v<T>) return detail::int_div(x, y);
        else return x / y;
      case BinaryOp::Eq: return x == y;
      case BinaryOp::ReluBackward: return y > T(0) ? x : T(0);
      case BinaryOp::Maximum: return max_propagating_nan(x, y);
    }
    return T(0);
  }
};

// The innermost loop of a broadcast op, specialised on the op so the compiler vectorizes it.
template <typename T, typename R, BinaryOp Op>
void inner_loop(R* out, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n) {
  BinaryFn<T> f{Op};
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<R>(f(a[i], b[i]));
  } else if (sa == 1 && sb == 0) {
    const T y = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<R>(f(a[i], y));
  } else if (sa == 0 && sb == 1) {
    const T x = *a;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<R>(f(x, b[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<R>(f(a[i * sa], b[i * sb]));
  }
}

// Walks the outer dimensions of the plan recursively; `out` is contiguous.
template <typename T, typename R, BinaryOp Op>
void broadcast_loop(const BroadcastPlan& p, size_t d, R* out, const T* a, const T* b) {
  const int64_t n = p.shape[d];
  if (d + 1 == p.shape.size()) {
    inner_loop<T, R, Op>(out, a, p.stride_a[d], b, p.stride_b[d], n);
    return;
  }
  int64_t block = 1;
  for (size_t k = d + 1; k < p.shape.size(); ++k) block *= p.shape[k];
  for (int64_t i = 0; i < n; ++i)
    broadcast_loop<T, R, Op>(p, d + 1, out + i * block, a + i * p.stride_a[d], b + i * p.stride_b[d]);
}

template <typename T, typename R>
void run_binary(BinaryOp op, const BroadcastPlan& p, R* out, const T* a, const T* b) {
  switch (op) {
#define LOCKSTEP_CASE(OP) \
  case BinaryOp::OP: return broadcast_loop<T, R, BinaryOp::OP>(p, 0, out, a, b);
    LOCKSTEP_CASE(Add)
    LOCKSTEP_CASE(Sub)
    LOCKSTEP_CASE(Mul)
    LOCKSTEP_CASE(Div)
    LOCKSTEP_CASE(Eq)
    LOCKSTEP_CASE(ReluBackward)
    LOCKSTEP_CASE(Maximum)
#undef LOCKSTEP_CASE
  }
}

// torch.optim.SGD's update for one parameter, with the options fixed at compile time and the three
// arrays declared unaliased (distinct tensors: ops::sgd_step_ checks), so the loop has no branch and
// vectorizes.
template <typename T>
struct SgdArgs {
  T* param;
  const T* grad;
  T* momentum_buffer;  // null without momentum
  int64_t n;
  T lr, momentum, one_minus_dampening, weight_decay;
};

template <typename T, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_kernel(const SgdArgs<T>& a) {
  T* __restrict p = a.param;
  const T* __restrict g = a.grad;
  T* __restrict m = a.momentum_buffer;
  for (int64_t i = 0; i < a.n; ++i) {
    T d = g[i] + a.weight_decay * p[i];
    if constexpr (kMomentum) {
      const T mi = kFirst ? d : a.momentum * m[i] + a.one_minus_dampening * d;
      m[i] = mi;
      d = kNesterov ? d + a.momentum * mi : mi;
    }
    p[i] -= a.lr * d;
  }
}

class CpuBackend final : public Backend {
 public:
  void* allocate(size_t nbytes, Device) override {
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    LOCKSTEP_CHECK(p, "CPU allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t, Device) override { std::free(p); }
  void synchronize(Device) override {}

  void copy(Tensor& dst, const Tensor& src) override {
    LOCKSTEP_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "copy: CPU backend asked to copy ", src.device(),
                   " to ", dst.device());
    std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
  }

  void fill(Tensor& out, double v) override {
    dispatch(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      arr<T>(out).setConstant(static_cast<T>(v));
    });
  }

  void cast(Tensor& out, const Tensor& a) override {
    dispatch(out.dtype(), [&](auto to) {
      using O = typename decltype(to)::type;
      dispatch(a.dtype(), [&](auto from) {
        using I = typename decltype(from)::type;
        arr<O>(out) = carr<I>(a).template cast<O>();
      });
    });
  }

  void unary(UnaryOp op, Tensor& out, const Tensor& a) override {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto x = carr<T>(a);
      auto y = arr<T>(out);
      switch (op) {
        case UnaryOp::Neg: y = -x; break;
        case UnaryOp::Relu: y = x.max(T(0)); break;
        case UnaryOp::Abs: y = x.abs(); break;
        case UnaryOp::Exp:
          if constexpr (std::is_floating_point_v<T>) y = x.exp();
          break;
        case UnaryOp::Log:
          if constexpr (std::is_floating_point_v<T>) y = x.log();
          break;
        case UnaryOp::Sqrt:
          if constexpr (std::is_floating_point_v<T>) y = x.sqrt();
          break;
      }
    });
  }

  void binary(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b, const BroadcastPlan& p) override {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (op == BinaryOp::Eq) run_binary<T, int64_t>(op, p, out.data<int64_t>(), a.data<T>(), b.data<T>());
      else run_binary<T, T>(op, p, out.data<T>(), a.data<T>(), b.data<T>());
    });
  }

  void binary_scalar(BinaryOp op, Tensor& out, const Tensor& a, double s, bool reverse) override {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T v = static_cast<T>(s);
      BroadcastPlan p;
      p.shape = {a.numel()};
      p.stride_a = {reverse ? 0 : 1};
      p.stride_b = {reverse ? 1 : 0};
      const T* x = a.data<T>();
      const T* ap = reverse ? &v : x;
      const T* bp = reverse ? x : &v;
      if (op == BinaryOp::Eq) run_binary<T, int64_t>(op, p, out.data<int64_t>(), ap, bp);
      else run_binary<T, T>(op, p, out.data<T>(), ap, bp);
    });
  }

  void gemm(Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, double alpha, double beta) override {
    dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
      using T = typename decltype(tag)::type;
      cpu::gemm(a.data<T>(), a.size(0), a.size(1), ta, b.data<T>(), b.size(0), b.size(1), tb, out.data<T>(),
                static_cast<T>(alpha), static_cast<T>(beta));
    });
  }

  void transpose2d(Tensor& out, const Tensor& a) override {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      MatMap<T>(out.data<T>(), out.size(0), out.size(1)) = ConstMatMap<T>(a.data<T>(), a.size(0), a.size(1)).transpose();
    });
  }

  void reduce(ReduceOp op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) override {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = a.data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        const T* base = x + o * n * inner;
        if (op == ReduceOp::Argmax) {
          int64_t* y = out.data<int64_t>() + o * inner;
          for (int64_t i = 0; i < inner; ++i) {
            int64_t best = 0;
            T bv = base[i];
            for (int64_t k = 1; k < n; ++k) {
              T v = base[k * inner + i];
              if (v > bv || (std::isnan(double(v)) && !std::isnan(double(bv)))) bv = v, best = k;
            }
            y[i] = best;
          }
          continue;
        }
        T* y = out.data<T>() + o * inner;
        if (op == ReduceOp::Max) {
          std::copy(base, base + inner, y);
          for (int64_t k = 1; k < n; ++k)
            for (int64_t i = 0; i < inner; ++i) y[i] = max_propagating_nan(y[i], base[k * inner + i]);
          continue;
        }
        // Sum and mean accumulate in double for float inputs: a long sum of float32 loses digits.
        using Acc = std::conditional_t<std::is_same_v<T, float>, double, T>;
        if (inner == 1) {
          Acc s = 0;
          for (int64_t k = 0; k < n; ++k) s += base[k];
          y[0] = static_cast<T>(op == ReduceOp::Mean ? s / static_cast<Acc>(n) : s);
        } else {
          std::fill(y, y + inner, T(0));
          for (int64_t k = 0; k < n; ++k)
            for (int64_t i = 0; i < inner; ++i) y[i] += base[k * inner + i];
          if (op == ReduceOp::Mean)
            for (int64_t i = 0; i < inner; ++i) y[i] = static_cast<T>(y[i] / static_cast<Acc>(n));
        }
      }
    });
  }

  void log_softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) override {
    dispatch_floating(a.dtype(), "log_softmax", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = a.data<T>();
      T* y = out.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* xr = x + o * n * inner + i;
          T* yr = y + o * n * inner + i;
          T m = -std::numeric_limits<T>::infinity();
          for (int64_t k = 0; k < n; ++k) m = std::max(m, xr[k * inner]);
          // Subtracting the max keeps exp() from overflowing (stable log-sum-exp).
          double s = 0;
          for (int64_t k = 0; k < n; ++k) s += std::exp(double(xr[k * inner] - m));
          T lse = m + static_cast<T>(std::log(s));
          for (int64_t k = 0; k < n; ++k) yr[k * inner] = xr[k * inner] - lse;
        }
    });
  }

  void log_softmax_backward(Tensor& gi, const Tensor& go, const Tensor& y, int64_t outer, int64_t n,
                            int64_t inner) override {
    dispatch_floating(y.dtype(), "log_softmax_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t base = o * n * inner + i;
          const T* g = go.data<T>() + base;
          const T* yr = y.data<T>() + base;
          T* r = gi.data<T>() + base;
          double s = 0;
          for (int64_t k = 0; k < n; ++k) s += g[k * inner];
          for (int64_t k = 0; k < n; ++k) r[k * inner] = g[k * inner] - std::exp(yr[k * inner]) * static_cast<T>(s);
        }
    });
  }

  static void check_target(int64_t t, int64_t c, int64_t i, const char* op) {
    LOCKSTEP_CHECK(t >= 0 && t < c, op, ": target ", t, " at position ", i, " is out of range for ", c, " classes");
  }

  void nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) override {
    dispatch_floating(logp.dtype(), "nll_loss", [&](auto tag) {
      using T = typename decltype(tag)::type;
      int64_t n = logp.size(0), c = logp.size(1);
      const T* lp = logp.data<T>();
      const int64_t* t = target.data<int64_t>();
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        check_target(t[i], c, i, "cross_entropy");
        s += lp[i * c + t[i]];
      }
      *out.data<T>() = static_cast<T>(-s * scale);
    });
  }

  void nll_loss_backward(Tensor& g, const Tensor& go, const Tensor& target, double scale) override {
    dispatch_floating(g.dtype(), "nll_loss_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      int64_t n = g.size(0), c = g.size(1);
      const int64_t* t = target.data<int64_t>();
      T v = static_cast<T>(-scale * static_cast<double>(*go.data<T>()));
      for (int64_t i = 0; i < n; ++i) {
        check_target(t[i], c, i, "cross_entropy backward");
        g.data<T>()[i * c + t[i]] = v;
      }
    });
  }

  void index_select(Tensor& out, const Tensor& a, const Tensor& index) override {
    int64_t rows = a.size(0), k = index.numel();
    size_t row_bytes = rows ? a.nbytes() / rows : 0;
    const int64_t* idx = index.data<int64_t>();
    const char* src = static_cast<const char*>(a.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t i = 0; i < k; ++i) {
      LOCKSTEP_CHECK(idx[i] >= 0 && idx[i] < rows, "index_select: index ", idx[i], " at position ", i,
                     " is out of range for ", rows, " rows");
      std::memcpy(dst + i * row_bytes, src + idx[i] * row_bytes, row_bytes);
    }
  }

  void index_add(Tensor& out, const Tensor& index, const Tensor& src) override {
    dispatch(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      int64_t rows = out.size(0), k = index.numel(), inner = src.numel() / std::max<int64_t>(k, 1);
      const int64_t* idx = index.data<int64_t>();
      for (int64_t i = 0; i < k; ++i) {
        LOCKSTEP_CHECK(idx[i] >= 0 && idx[i] < rows, "index_add_: index ", idx[i], " at position ", i,
                       " is out of range for ", rows, " rows");
        T* d = out.data<T>() + idx[i] * inner;
        const T* s = src.data<T>() + i * inner;
        for (int64_t j = 0; j < inner; ++j) d[j] += s[j];
      }
    });
  }

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, double lr, double momentum, double dampening,
                double wd, bool nesterov, bool first) override {
    dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const SgdArgs<T> a{param.data<T>(), grad.data<T>(), momentum != 0 ? buf.data<T>() : nullptr, param.numel(),
                         T(lr), T(momentum), T(1 - dampening), T(wd)};
      if (momentum == 0) {
        sgd_kernel<T, false, false, false>(a);
      } else if (first) {
        nesterov ? sgd_kernel<T, true, true, true>(a) : sgd_kernel<T, true, true, false>(a);
      } else {
        nesterov ? sgd_kernel<T, true, false, true>(a) : sgd_kernel<T, true, false, false>(a);
      }
    });
  }
};

// Registered before main(); //tensor:cpu is alwayslink so this survives static linking.
const bool registered = [] {
  static CpuBackend cpu;
  register_backend(DeviceType::CPU, &cpu);
  return true;
}();

}  // namespace
}  // namespace lockstep
