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

// Every row on every dtype it accepts, bfloat16 and float16 included: in_compute_type converts each
// element to float32 as it is loaded and rounds the result once as it is stored, inside the one loop,
// so a 16-bit tensor is read and written at 16 bits. The conversions are bit operations that vectorize
// (bfloat16: a shift, and an integer round to nearest even; float16's are scalar).
void unary(UnaryOp op, const StridedPlan& p, void* out, Dtype dt, const void* a) {
  dispatch(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_op(op, [&](auto f, auto kinds) {
      if constexpr (op_accepts<decltype(kinds)::value, T>()) {
        const auto g = in_compute_type<T>(f);
        using R = decltype(g(T{}));
        strided_apply(p, g, static_cast<R*>(out), static_cast<const T*>(a));
      } else {
        fail(op_name(op), ": not defined for ", dt);
      }
    });
  });
}

namespace {

// out = f(a, b) with a of type A, b of type B, computed in compute_t<S> and stored as S (or bool).
template <typename S, typename A, typename B, typename F>
void binary_as(const StridedPlan& p, F f, void* out, const void* a, const void* b) {
  const auto g = in_compute_type<S>(f);
  using R = decltype(g(A{}, B{}));
  strided_apply(p, g, static_cast<R*>(out), static_cast<const A*>(a), static_cast<const B*>(b));
}

// A 16-bit operand H beside a float32 one, in either order, into float32 (the residual stream under
// autocast) or into H (a 16-bit tensor with a scalar, which is held in float32 as PyTorch holds it).
template <typename H, typename F>
void binary_mixed(const StridedPlan& p, F f, Dtype out_dt, void* out, Dtype a_dt, const void* a, const void* b) {
  const bool a_half = a_dt == dtype_of<H>::value;
  if (out_dt == dtype_of<H>::value) {
    if (a_half) binary_as<H, H, float>(p, f, out, a, b);
    else binary_as<H, float, H>(p, f, out, a, b);
  } else {
    if (a_half) binary_as<float, H, float>(p, f, out, a, b);
    else binary_as<float, float, H>(p, f, out, a, b);
  }
}

}  // namespace

void binary(BinaryOp op, const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt, const void* a, Dtype b_dt,
            const void* b) {
  if (a_dt != b_dt) {
    const Dtype half = is_reduced_floating_point(a_dt) ? a_dt : b_dt;
    LOCKSTEP_CHECK(is_reduced_floating_point(half) && (a_dt == kFloat32 || b_dt == kFloat32), op_name(op),
                   ": no kernel for ", dtype_name(a_dt), " with ", dtype_name(b_dt));
    visit_op(op, [&](auto f, auto) {
      if (half == kBFloat16) binary_mixed<BFloat16>(p, f, out_dt, out, a_dt, a, b);
      else binary_mixed<Float16>(p, f, out_dt, out, a_dt, a, b);
    });
    return;
  }
  dispatch(a_dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_op(op, [&](auto f, auto kinds) {
      if constexpr (op_accepts<decltype(kinds)::value, T>()) binary_as<T, T, T>(p, f, out, a, b);
      else fail(op_name(op), ": not defined for ", a_dt);
    });
  });
}

void where(const StridedPlan& p, void* out, Dtype dt, const bool* cond, const void* a, const void* b) {
  dispatch(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The condition read as bytes: GCC vectorizes a select on uint8_t but not on bool (masked_fill of
    // the causal mask, 3% of a GPT step, ran one element at a time).
    strided_apply(p, [](uint8_t c, T x, T y) { return c ? x : y; }, static_cast<T*>(out),
                  reinterpret_cast<const uint8_t*>(cond), static_cast<const T*>(a), static_cast<const T*>(b));
  });
}

LOCKSTEP_ISA_END
