// Elementwise kernels: fill, cast, unary, binary with broadcasting, binary with a scalar, and the fused
// SGD update. Each op is a template parameter, so every (op, dtype) pair is its own tight loop. The
// arithmetic is the CPU backend's (tensor/cpu/cpu_backend.cpp), rule for rule; where the CPU raises on
// data only the device holds (an int64 divisor of 0), the kernel records it (device_error.h).
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_error.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/int_div.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// --- the elementwise functions -------------------------------------------------------------------

template <UnaryOp Op, typename T>
__device__ T unary_fn(T x) {
  if constexpr (Op == UnaryOp::Neg) return -x;
  else if constexpr (Op == UnaryOp::Relu) return x < T(0) ? T(0) : x;  // Eigen's max(x, 0): NaN stays NaN
  else if constexpr (Op == UnaryOp::Abs) {
    if constexpr (std::is_floating_point_v<T>) return fabs(x);
    else return x < 0 ? -x : x;
  } else if constexpr (std::is_same_v<T, float>) {
    if constexpr (Op == UnaryOp::Exp) return expf(x);
    else if constexpr (Op == UnaryOp::Log) return logf(x);
    else return sqrtf(x);
  } else {
    if constexpr (Op == UnaryOp::Exp) return exp(x);
    else if constexpr (Op == UnaryOp::Log) return log(x);
    else return sqrt(x);
  }
}

// Eq writes int64 0/1; every other op writes the input type.
template <BinaryOp Op, typename T>
using BinaryOut = std::conditional_t<Op == BinaryOp::Eq, int64_t, T>;

template <BinaryOp Op, typename T>
__device__ BinaryOut<Op, T> binary_fn(T x, T y) {
  if constexpr (Op == BinaryOp::Add) return x + y;
  else if constexpr (Op == BinaryOp::Sub) return x - y;
  else if constexpr (Op == BinaryOp::Mul) return x * y;
  else if constexpr (Op == BinaryOp::Div) {
    if constexpr (std::is_integral_v<T>) return ::lockstep::detail::int_div(x, y);  // as the CPU backend
    else return x / y;
  } else if constexpr (Op == BinaryOp::Eq) return x == y ? 1 : 0;
  else if constexpr (Op == BinaryOp::ReluBackward) return y > T(0) ? x : T(0);
  else {  // Maximum: NaN in either operand gives NaN, as torch.maximum (and the CPU backend)
    if constexpr (std::is_floating_point_v<T>) {
      if (y != y) return y;
    }
    return x < y ? y : x;
  }
}

// Integer division by zero has no value: the CPU backend raises, and a GPU gives an unspecified one
// silently (the CPU's check would need the divisor on the host, a sync per op). So these (op, dtype)
// pairs check the divisor on the device: the division is skipped (0 is written) and the error recorded,
// then raised at the next synchronization. x / y truncates toward zero, as in C++ and on the CPU.
template <BinaryOp Op, typename T>
constexpr bool kChecksDivisor = Op == BinaryOp::Div && std::is_integral_v<T>;

// binary_fn for output element i, with the divisor check where kChecksDivisor. Every other pair compiles
// to binary_fn alone and never touches `err` (null for them).
template <BinaryOp Op, typename T>
__device__ BinaryOut<Op, T> binary_at(T x, T y, int64_t i, IndexError* err) {
  if constexpr (kChecksDivisor<Op, T>) {
    if (!divisor_ok(err, i, x, y)) return 0;
  }
  return binary_fn<Op>(x, y);
}

// --- kernels -------------------------------------------------------------------------------------

template <typename T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) out[i] = value;
}

template <typename O, typename I>
__global__ void cast_kernel(O* out, const I* a, int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) out[i] = static_cast<O>(a[i]);
}

template <UnaryOp Op, typename T>
__global__ void unary_kernel(T* out, const T* a, int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) out[i] = unary_fn<Op>(a[i]);
}

// The fast path: each input contiguous (stride 1) or one broadcast value (stride 0). The binary kernels
// take the device's error record for the divisor check (binary_at); null where the pair has none.
template <BinaryOp Op, typename T>
__global__ void binary_flat_kernel(BinaryOut<Op, T>* out, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n,
                                   IndexError* err) {
  LOCKSTEP_GRID_STRIDE(i, n) out[i] = binary_at<Op>(a[i * sa], b[i * sb], i, err);
}

// The general path: any BroadcastPlan up to kMaxDims merged dimensions. `out` is contiguous.
constexpr int kMaxDims = 12;
struct StridedPlan {
  int nd;
  int64_t shape[kMaxDims], sa[kMaxDims], sb[kMaxDims];
};

template <BinaryOp Op, typename T>
__global__ void binary_strided_kernel(BinaryOut<Op, T>* out, const T* a, const T* b, StridedPlan p, int64_t n,
                                      IndexError* err) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = p.nd - 1; d >= 0; --d) {
      const int64_t k = rest % p.shape[d];
      rest /= p.shape[d];
      ia += k * p.sa[d];
      ib += k * p.sb[d];
    }
    out[i] = binary_at<Op>(a[ia], b[ib], i, err);
  }
}

template <BinaryOp Op, typename T>
__global__ void binary_scalar_kernel(BinaryOut<Op, T>* out, const T* a, T s, bool reverse, int64_t n,
                                     IndexError* err) {
  LOCKSTEP_GRID_STRIDE(i, n) out[i] = reverse ? binary_at<Op>(s, a[i], i, err) : binary_at<Op>(a[i], s, i, err);
}

// torch.optim.SGD for one parameter (see optim/sgd.h), in one pass over p, g and the momentum buffer.
template <typename T>
__global__ void sgd_kernel(T* p, const T* g, T* m, T lr, T mom, T damp, T wd, bool nesterov, bool first, int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    T d = g[i] + wd * p[i];
    if (m) {
      m[i] = first ? d : mom * m[i] + damp * d;
      d = nesterov ? d + mom * m[i] : m[i];
    }
    p[i] -= lr * d;
  }
}

// Calls launch(err) with the device's error record through launch_checked when the divisor check is on
// and a divisor may be 0, so the record is read back at the next synchronization; otherwise with null,
// so that float division and the other ops cost no copy at the sync. (Null is safe for a nonzero scalar
// divisor too: divisor_ok touches the record only for a 0.)
template <BinaryOp Op, typename T, typename Launch>
void launch_binary(DeviceContext& ctx, bool may_divide_by_zero, Launch&& launch) {
  if constexpr (kChecksDivisor<Op, T>) {
    if (may_divide_by_zero) return ctx.launch_checked(launch);
  }
  launch(static_cast<IndexError*>(nullptr));
}

// Calls fn(std::integral_constant<BinaryOp, op>) so `op` becomes a template argument.
template <typename Fn>
void dispatch_binary(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::Add: return fn(std::integral_constant<BinaryOp, BinaryOp::Add>{});
    case BinaryOp::Sub: return fn(std::integral_constant<BinaryOp, BinaryOp::Sub>{});
    case BinaryOp::Mul: return fn(std::integral_constant<BinaryOp, BinaryOp::Mul>{});
    case BinaryOp::Div: return fn(std::integral_constant<BinaryOp, BinaryOp::Div>{});
    case BinaryOp::Eq: return fn(std::integral_constant<BinaryOp, BinaryOp::Eq>{});
    case BinaryOp::ReluBackward: return fn(std::integral_constant<BinaryOp, BinaryOp::ReluBackward>{});
    case BinaryOp::Maximum: return fn(std::integral_constant<BinaryOp, BinaryOp::Maximum>{});
  }
  fail("binary: unknown op ", int(op));
}

template <typename Fn>
void dispatch_unary(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Neg: return fn(std::integral_constant<UnaryOp, UnaryOp::Neg>{});
    case UnaryOp::Exp: return fn(std::integral_constant<UnaryOp, UnaryOp::Exp>{});
    case UnaryOp::Log: return fn(std::integral_constant<UnaryOp, UnaryOp::Log>{});
    case UnaryOp::Relu: return fn(std::integral_constant<UnaryOp, UnaryOp::Relu>{});
    case UnaryOp::Sqrt: return fn(std::integral_constant<UnaryOp, UnaryOp::Sqrt>{});
    case UnaryOp::Abs: return fn(std::integral_constant<UnaryOp, UnaryOp::Abs>{});
  }
  fail("unary: unknown op ", int(op));
}

}  // namespace

void CudaBackend::fill(Tensor& out, double value) {
  OnDevice on(out.device());
  const int64_t n = out.numel();
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("fill_kernel", fill_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), out.data<T>(),
                    static_cast<T>(value), n);
  });
}

void CudaBackend::cast(Tensor& out, const Tensor& a) {
  OnDevice on(out.device());
  const int64_t n = out.numel();
  dispatch(out.dtype(), [&](auto to) {
    using O = typename decltype(to)::type;
    dispatch(a.dtype(), [&](auto from) {
      using I = typename decltype(from)::type;
      LOCKSTEP_LAUNCH("cast_kernel", cast_kernel<O, I>, grid_for(n, on.ctx), kThreads, on.stream(), out.data<O>(),
                      a.data<I>(), n);
    });
  });
}

void CudaBackend::unary(UnaryOp op, Tensor& out, const Tensor& a) {
  OnDevice on(out.device());
  const int64_t n = a.numel();
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_unary(op, [&](auto op_c) {
      constexpr UnaryOp Op = decltype(op_c)::value;
      constexpr bool supported = std::is_floating_point_v<T> || Op == UnaryOp::Neg || Op == UnaryOp::Relu ||
                               Op == UnaryOp::Abs;
      if constexpr (supported) {
        LOCKSTEP_LAUNCH("unary_kernel", unary_kernel<Op, T>, grid_for(n, on.ctx), kThreads, on.stream(), out.data<T>(),
                        a.data<T>(), n);
      } else {
        fail("unary: exp, log and sqrt need a floating-point tensor, got ", a.dtype());
      }
    });
  });
}

void CudaBackend::binary(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b, const BroadcastPlan& plan) {
  OnDevice on(out.device());
  const int64_t n = out.numel();
  const bool flat = plan.shape.size() == 1 && plan.stride_a[0] <= 1 && plan.stride_b[0] <= 1;
  StridedPlan sp{};
  if (!flat) {
    LOCKSTEP_CHECK(plan.shape.size() <= kMaxDims, "binary: broadcasting over ", plan.shape.size(),
                   " non-mergeable dimensions; the CUDA backend handles at most ", kMaxDims);
    sp.nd = static_cast<int>(plan.shape.size());
    for (int d = 0; d < sp.nd; ++d) {
      sp.shape[d] = plan.shape[d];
      sp.sa[d] = plan.stride_a[d];
      sp.sb[d] = plan.stride_b[d];
    }
  }
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_binary(op, [&](auto op_c) {
      constexpr BinaryOp Op = decltype(op_c)::value;
      using R = BinaryOut<Op, T>;
      // The divisor is device data: any element may be 0.
      launch_binary<Op, T>(on.ctx, /*may_divide_by_zero=*/true, [&](IndexError* err) {
        if (flat) {
          LOCKSTEP_LAUNCH("binary_flat_kernel", binary_flat_kernel<Op, T>, grid_for(n, on.ctx), kThreads, on.stream(),
                          out.data<R>(), a.data<T>(), plan.stride_a[0], b.data<T>(), plan.stride_b[0], n, err);
        } else {
          LOCKSTEP_LAUNCH("binary_strided_kernel", binary_strided_kernel<Op, T>, grid_for(n, on.ctx), kThreads,
                          on.stream(), out.data<R>(), a.data<T>(), b.data<T>(), sp, n, err);
        }
      });
    });
  });
}

void CudaBackend::binary_scalar(BinaryOp op, Tensor& out, const Tensor& a, double s, bool reverse) {
  OnDevice on(out.device());
  const int64_t n = a.numel();
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_binary(op, [&](auto op_c) {
      constexpr BinaryOp Op = decltype(op_c)::value;
      const T v = static_cast<T>(s);
      // With reverse the tensor is the divisor; otherwise the divisor is v, known here: a nonzero one
      // needs no record (ops::binary_scalar already refuses 0 at the call; the kernel stays safe anyway).
      launch_binary<Op, T>(on.ctx, /*may_divide_by_zero=*/reverse || v == T(0), [&](IndexError* err) {
        LOCKSTEP_LAUNCH("binary_scalar_kernel", binary_scalar_kernel<Op, T>, grid_for(n, on.ctx), kThreads,
                        on.stream(), out.data<BinaryOut<Op, T>>(), a.data<T>(), v, reverse, n, err);
      });
    });
  });
}

void CudaBackend::sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, double lr, double momentum,
                           double dampening, double wd, bool nesterov, bool first) {
  OnDevice on(param.device());
  const int64_t n = param.numel();
  dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* m = momentum != 0 ? buf.data<T>() : nullptr;
    LOCKSTEP_LAUNCH("sgd_kernel", sgd_kernel<T>, grid_for(n, on.ctx), kThreads, on.stream(), param.data<T>(),
                    grad.data<T>(), m, T(lr), T(momentum), T(1 - dampening), T(wd), nesterov, first, n);
  });
}

}  // namespace lockstep::cuda::detail
