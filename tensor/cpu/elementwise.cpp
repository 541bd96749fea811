// The CPU backend's elementwise kernels: every row of tensor/elementwise_ops.h, for every dtype the
// row accepts, run by the one strided loop of strided_loop.h; dtype conversions; fill; where.
// Compiled once per ISA (tensor/cpu/isa.h); every header is included before LOCKSTEP_ISA_BEGIN.
#include "tensor/cpu/elementwise.h"

#include "tensor/cpu/isa.h"
#include "tensor/cpu/strided_loop.h"

LOCKSTEP_ISA_BEGIN

void fill(const StridedPlan& p, Dtype dt, void* out, double v) {
  dispatch(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T value = static_cast<T>(v);
    strided_apply(p, [value]() { return value; }, static_cast<T*>(out));
  });
}

void copy_(const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt, const void* a) {
  dispatch(out_dt, [&](auto to) {
    using O = typename decltype(to)::type;
    dispatch(a_dt, [&](auto from) {
      using I = typename decltype(from)::type;
      strided_apply(p, [](I x) { return static_cast<O>(x); }, static_cast<O*>(out), static_cast<const I*>(a));
    });
  });
}

void unary(UnaryOp op, const StridedPlan& p, void* out, Dtype dt, const void* a) {
  dispatch_compute(dt, op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_op(op, [&](auto f, auto kinds) {
      if constexpr (op_accepts<decltype(kinds)::value, T>()) {
        using R = decltype(f(T{}));
        strided_apply(p, f, static_cast<R*>(out), static_cast<const T*>(a));
      } else {
        fail(op_name(op), ": not defined for ", dt);
      }
    });
  });
}

void binary(BinaryOp op, const StridedPlan& p, void* out, Dtype dt, const void* a, const void* b) {
  dispatch_compute(dt, op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_op(op, [&](auto f, auto kinds) {
      if constexpr (op_accepts<decltype(kinds)::value, T>()) {
        using R = decltype(f(T{}, T{}));
        strided_apply(p, f, static_cast<R*>(out), static_cast<const T*>(a), static_cast<const T*>(b));
      } else {
        fail(op_name(op), ": not defined for ", dt);
      }
    });
  });
}

void where(const StridedPlan& p, void* out, Dtype dt, const bool* cond, const void* a, const void* b) {
  dispatch_compute(dt, "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The condition read as bytes: GCC vectorizes a select on uint8_t but not on bool (masked_fill of
    // the causal mask, 3% of a GPT step, ran one element at a time).
    strided_apply(p, [](uint8_t c, T x, T y) { return c ? x : y; }, static_cast<T*>(out),
                  reinterpret_cast<const uint8_t*>(cond), static_cast<const T*>(a), static_cast<const T*>(b));
  });
}

LOCKSTEP_ISA_END
