// The CPU backend's elementwise kernels: every row of tensor/elementwise_ops.h, for every dtype the
// row accepts, run by the one strided loop of strided_loop.h; dtype conversions; fill; where.
#include "tensor/cpu/elementwise.h"

#include "tensor/cpu/strided_loop.h"
#include "tensor/tensor.h"

namespace lockstep::cpu {

void fill(const StridedPlan& p, Tensor& out, double v) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T value = static_cast<T>(v);
    strided_apply(p, [value]() { return value; }, out.data<T>());
  });
}

void copy_(const StridedPlan& p, Tensor& out, const Tensor& a) {
  dispatch(out.dtype(), [&](auto to) {
    using O = typename decltype(to)::type;
    dispatch(a.dtype(), [&](auto from) {
      using I = typename decltype(from)::type;
      strided_apply(p, [](I x) { return static_cast<O>(x); }, out.data<O>(), a.data<I>());
    });
  });
}

void unary(UnaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a) {
  dispatch_compute(a.dtype(), op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_op(op, [&](auto f, auto kinds) {
      if constexpr (op_accepts<decltype(kinds)::value, T>()) {
        using R = decltype(f(T{}));
        strided_apply(p, f, out.data<R>(), a.data<T>());
      } else {
        fail(op_name(op), ": not defined for ", a.dtype());
      }
    });
  });
}

namespace {

// binary's body on raw operands of dtype `dt`, so binary_scalar can pass its scalar from the stack.
void binary_raw(BinaryOp op, const StridedPlan& p, Tensor& out, Dtype dt, const void* a, const void* b) {
  dispatch_compute(dt, op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_op(op, [&](auto f, auto kinds) {
      if constexpr (op_accepts<decltype(kinds)::value, T>()) {
        using R = decltype(f(T{}, T{}));
        strided_apply(p, f, out.data<R>(), static_cast<const T*>(a), static_cast<const T*>(b));
      } else {
        fail(op_name(op), ": not defined for ", dt);
      }
    });
  });
}

}  // namespace

void binary(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const Tensor& b) {
  binary_raw(op, p, out, a.dtype(), a.data_ptr(), b.data_ptr());
}

// The scalar becomes an operand of stride 0, so binary's kernels serve (one instantiation per op and
// dtype instead of three); it lives on the stack, as wide as the widest dtype.
void binary_scalar(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, double s, bool reverse) {
  alignas(8) unsigned char scalar[8];
  dispatch_compute(a.dtype(), op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    static_assert(sizeof(T) <= sizeof scalar);
    *reinterpret_cast<T*>(scalar) = static_cast<T>(s);
  });
  StridedPlan q = p;
  for (int d = 0; d < q.nd; ++d) {
    q.stride[2][d] = reverse ? p.stride[1][d] : 0;
    q.stride[1][d] = reverse ? 0 : p.stride[1][d];
  }
  if (reverse) binary_raw(op, q, out, a.dtype(), scalar, a.data_ptr());
  else binary_raw(op, q, out, a.dtype(), a.data_ptr(), scalar);
}

void where(const StridedPlan& p, Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_compute(a.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_apply(p, [](bool c, T x, T y) { return c ? x : y; }, out.data<T>(), cond.data<bool>(), a.data<T>(),
                  b.data<T>());
  });
}

}  // namespace lockstep::cpu
