// Elementwise kernels over a StridedPlan (tensor/backend.h): fill, copy_ (every dtype pair), unary,
// binary, binary with a scalar, where; and the fused SGD update. Each kernel is written once over the
// op's functor from tensor/elementwise_ops.h, so a new row of that table needs no change here: the
// functor's return type is the output's element type, and its dtype rule decides which (op, dtype)
// kernels exist. bfloat16 and float16 are read and written at 16 bits and computed in float32
// (in_compute_type, tensor/elementwise_ops.h), as on the CPU. Where the CPU raises on data only the device holds (an integer divisor of 0), the
// kernel records it instead (device_error.h).
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_error.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/elementwise_ops.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// --- walking a plan --------------------------------------------------------------------------------

// The element offsets of plan element i (row-major over p.shape) for operands [0, N).
// kFlat (p.flat()): one dimension, every stride 0 or 1, so an offset is i or 0. Otherwise i is split
// into coordinates by div/mod from the last dimension, each operand's offset the sum of coordinate x
// stride. The plan arrives by value (kernel parameter memory), so these reads are uniform across threads.
template <bool kFlat, int N>
__device__ inline void offsets(const StridedPlan& p, int64_t i, int64_t (&off)[N]) {
  if constexpr (kFlat) {
    for (int k = 0; k < N; ++k) off[k] = i * p.stride[k][0];
  } else {
    for (int k = 0; k < N; ++k) off[k] = 0;
    int64_t rest = i;
    for (int d = p.nd - 1; d > 0; --d) {
      const int64_t c = rest % p.shape[d];
      rest /= p.shape[d];
      for (int k = 0; k < N; ++k) off[k] += c * p.stride[k][d];
    }
    for (int k = 0; k < N; ++k) off[k] += rest * p.stride[k][0];  // nd == 0: stride 0, one element
  }
}

// Calls launch(std::bool_constant<p.flat()>) unless the plan is empty, after checking its size.
template <typename Launch>
void for_plan(const StridedPlan& p, const char* op, Launch&& launch) {
  LOCKSTEP_CHECK(p.nd >= 0 && p.nd <= StridedPlan::kMaxDims && p.numel >= 0, op, ": bad StridedPlan (nd ", p.nd,
                 ", numel ", p.numel, ")");
  if (p.numel == 0) return;
  if (p.flat()) launch(std::true_type{});
  else launch(std::false_type{});
}

// --- kernels ---------------------------------------------------------------------------------------

template <typename T, bool kFlat>
__global__ void fill_kernel(T* out, T value, StridedPlan p) {
  LOCKSTEP_GRID_STRIDE(i, p.numel) {
    int64_t off[1];
    offsets<kFlat>(p, i, off);
    out[off[0]] = value;
  }
}

// O and I may be any two dtypes; bfloat16 and float16 convert through float32 (their structs' conversions).
template <typename O, typename I, bool kFlat>
__global__ void copy_kernel(O* out, const I* a, StridedPlan p) {
  LOCKSTEP_GRID_STRIDE(i, p.numel) {
    int64_t off[2];
    offsets<kFlat>(p, i, off);
    out[off[0]] = static_cast<O>(a[off[1]]);
  }
}

template <typename F, typename T>
using UnaryOut = decltype(F{}(T{}));
template <typename F, typename T>
using BinaryOut = decltype(F{}(T{}, T{}));

template <typename F, typename T, bool kFlat>
__global__ void unary_kernel(F f, UnaryOut<F, T>* out, const T* a, StridedPlan p) {
  LOCKSTEP_GRID_STRIDE(i, p.numel) {
    int64_t off[2];
    offsets<kFlat>(p, i, off);
    out[off[0]] = f(a[off[1]]);
  }
}

// Integer division by zero has no value: the CPU backend raises, and a GPU would give an unspecified one
// silently (the CPU's check needs the divisor on the host, a sync per op). So these (op, dtype) pairs
// check the divisor on the device: 0 is written, the error recorded and raised at the next
// synchronization.
template <typename F, typename T>
constexpr bool kChecksDivisor = fn::kDividesIntegers<F> && std::is_integral_v<T>;
// The kernels get the row wrapped in InComputeType: the check looks through it to the row.
template <typename F, typename T>
constexpr bool kChecksDivisor<InComputeType<F, T>, T> = kChecksDivisor<F, T>;

// out = f(x, y) with plan operands (out, a, b). A null a or b is the scalar s instead (binary_scalar),
// so one kernel serves both. `err` is the device's record where kChecksDivisor, else unused (null).
// f is in_compute_type<T>'s wrapper: operands are loaded into compute_t<T>, where the scalar already is
// (beside a 16-bit tensor it stays float32, PyTorch's opmath rule).
template <typename F, typename T, bool kFlat>
__global__ void binary_kernel(F f, BinaryOut<F, T>* out, const T* a, const T* b, compute_t<T> s, StridedPlan p,
                              IndexError* err) {
  using C = compute_t<T>;
  LOCKSTEP_GRID_STRIDE(i, p.numel) {
    int64_t off[3];
    offsets<kFlat>(p, i, off);
    const C x = a ? static_cast<C>(a[off[1]]) : s, y = b ? static_cast<C>(b[off[2]]) : s;
    if constexpr (kChecksDivisor<F, T>) {
      if (!divisor_ok(err, i, x, y)) {
        out[off[0]] = BinaryOut<F, T>(0);
        continue;
      }
    }
    out[off[0]] = f(x, y);
  }
}

template <typename T, bool kFlat>
__global__ void where_kernel(T* out, const bool* cond, const T* a, const T* b, StridedPlan p) {
  LOCKSTEP_GRID_STRIDE(i, p.numel) {
    int64_t off[4];
    offsets<kFlat>(p, i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

// torch.optim.SGD for one parameter: tensor/optim_step.h's sgd_update, the CPU loop's rule, on each
// element of p, g and the momentum buffer (contiguous, as the contract gives them). 16-bit parameters
// and buffers are loaded into float32, updated there and rounded once on store (PyTorch's fused
// optimizers' opmath rule).
template <typename T, bool kMomentum, bool kFirst, bool kNesterov>
__global__ void sgd_kernel(T* p, const T* g, T* m, lockstep::detail::SgdScalars<compute_t<T>> s, int64_t n) {
  using C = compute_t<T>;
  LOCKSTEP_GRID_STRIDE(i, n) {
    C pi = ld(p[i]), mi = kMomentum && !kFirst ? ld(m[i]) : C(0);
    lockstep::detail::sgd_update<kMomentum, kFirst, kNesterov>(pi, ld(g[i]), mi, s);
    p[i] = static_cast<T>(pi);
    if constexpr (kMomentum) m[i] = static_cast<T>(mi);
  }
}

// Queues launch(err) for one binary op: through launch_checked, with the device's error record, when
// the pair checks its divisor and a divisor may be 0 (the record is then read back at the next
// synchronization); otherwise with null, so that every other op costs no copy at the sync.
template <typename F, typename T, typename Launch>
void launch_binary(DeviceContext& ctx, bool may_divide_by_zero, Launch&& launch) {
  if constexpr (kChecksDivisor<F, T>) {
    if (may_divide_by_zero) return ctx.launch_checked(launch);
  }
  launch(static_cast<IndexError*>(nullptr));
}

// Shared by binary and binary_scalar: a and b are the operands' data (null: the scalar s), p's operand
// 1 walks a and operand 2 walks b.
void run_binary(BinaryOp op, const OpScalars& params, const StridedPlan& p, Tensor& out, Dtype dtype, const void* a,
                const void* b, double s) {
  OnDevice on(out.device());
  const char* name = op_name(op);
  for_plan(p, name, [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    visit_op(op, params, [&](auto f, auto kinds) {
      using F = std::decay_t<decltype(f)>;  // decay: g++ sees a reference in the nested lambda
      constexpr OpDtypes kKinds = decltype(kinds)::value;
      dispatch(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (op_accepts<kKinds, T>()) {
          using G = InComputeType<F, T>;
          using R = BinaryOut<G, T>;
          const compute_t<T> v = static_cast<compute_t<T>>(s);
          // The divisor b is device data, any element of which may be 0; a scalar one is known here.
          launch_binary<F, T>(on.ctx, /*may_divide_by_zero=*/b || v == compute_t<T>(0), [&](IndexError* err) {
            LOCKSTEP_LAUNCH("binary_kernel", binary_kernel<G, T, kFlat>, grid_for(p.numel, on.ctx), kThreads,
                            on.stream(), G{f}, out.data<R>(), static_cast<const T*>(a), static_cast<const T*>(b), v,
                            p, err);
          });
        } else {
          fail(name, ": not defined for ", dtype_name(dtype));
        }
      });
    });
  });
}

}  // namespace

void CudaBackend::fill(const StridedPlan& p, Tensor& out, double value) {
  OnDevice on(out.device());
  for_plan(p, "fill", [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    dispatch(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      LOCKSTEP_LAUNCH("fill_kernel", fill_kernel<T, kFlat>, grid_for(p.numel, on.ctx), kThreads, on.stream(),
                      out.data<T>(), static_cast<T>(value), p);
    });
  });
}

void CudaBackend::copy_(const StridedPlan& p, Tensor& out, const Tensor& a) {
  OnDevice on(out.device());
  for_plan(p, "copy_", [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    dispatch(out.dtype(), [&](auto to) {
      using O = typename decltype(to)::type;
      dispatch(a.dtype(), [&](auto from) {
        using I = typename decltype(from)::type;
        LOCKSTEP_LAUNCH("copy_kernel", copy_kernel<O, I, kFlat>, grid_for(p.numel, on.ctx), kThreads, on.stream(),
                        out.data<O>(), a.data<I>(), p);
      });
    });
  });
}

void CudaBackend::unary(UnaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const OpScalars& params) {
  OnDevice on(out.device());
  const char* name = op_name(op);
  for_plan(p, name, [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    visit_op(op, params, [&](auto f, auto kinds) {
      using F = std::decay_t<decltype(f)>;  // decay: g++ sees a reference in the nested lambda
      constexpr OpDtypes kKinds = decltype(kinds)::value;
      dispatch(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (op_accepts<kKinds, T>()) {
          using G = InComputeType<F, T>;
          LOCKSTEP_LAUNCH("unary_kernel", unary_kernel<G, T, kFlat>, grid_for(p.numel, on.ctx), kThreads, on.stream(),
                          G{f}, out.data<UnaryOut<G, T>>(), a.data<T>(), p);
        } else {
          fail(name, ": not defined for ", dtype_name(a.dtype()));
        }
      });
    });
  });
}

void CudaBackend::binary(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const Tensor& b,
                         const OpScalars& params) {
  LOCKSTEP_CHECK(a.dtype() == b.dtype(), op_name(op), ": operands of different dtypes reached the kernel (",
                 a.dtype(), ", ", b.dtype(), "); the ops layer promotes them first");
  run_binary(op, params, p, out, a.dtype(), a.data_ptr(), b.data_ptr(), 0.0);
}

void CudaBackend::binary_scalar(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, double s,
                                bool reverse, const OpScalars& params) {
  // The plan's operand 1 walks a; binary_kernel reads a through operand 1 or, with reverse, operand 2.
  StridedPlan q = p;
  if (reverse)
    for (int d = 0; d < StridedPlan::kMaxDims; ++d) q.stride[2][d] = p.stride[1][d], q.stride[1][d] = 0;
  const void* x = a.data_ptr();
  run_binary(op, params, q, out, a.dtype(), reverse ? nullptr : x, reverse ? x : nullptr, s);
}

void CudaBackend::where(const StridedPlan& p, Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  OnDevice on(out.device());
  for_plan(p, "where", [&](auto flat) {
    constexpr bool kFlat = decltype(flat)::value;
    dispatch(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      LOCKSTEP_LAUNCH("where_kernel", where_kernel<T, kFlat>, grid_for(p.numel, on.ctx), kThreads, on.stream(),
                      out.data<T>(), cond.data<bool>(), a.data<T>(), b.data<T>(), p);
    });
  });
}

void CudaBackend::sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, double lr, double momentum,
                           double dampening, double wd, bool nesterov, bool first) {
  OnDevice on(param.device());
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_any_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* m = momentum != 0 ? buf.data<T>() : nullptr;
    const lockstep::detail::SgdScalars<C> s{C(lr), C(momentum), C(1 - dampening), C(wd)};
    lockstep::detail::visit_sgd_options(momentum != 0, first, nesterov, [&](auto mom, auto fst, auto nes) {
      LOCKSTEP_LAUNCH("sgd_kernel", (sgd_kernel<T, decltype(mom)::value, decltype(fst)::value, decltype(nes)::value>),
                      grid_for(n, on.ctx), kThreads, on.stream(), param.data<T>(), grad.data<T>(), m, s, n);
    });
  });
}

}  // namespace lockstep::cuda::detail
