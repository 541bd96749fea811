// The CPU backend's elementwise kernels (tensor/cpu/elementwise.h): fill, where and same-dtype copies
// here; unary and binary rows handed to their dtype family's file (tensor/cpu/elementwise_families.h),
// and every conversion to or from bfloat16 and float16 to elementwise_half.cpp.
// Compiled once per ISA (tensor/cpu/isa.h); every header is included before LOCKSTEP_ISA_BEGIN.
#include "tensor/cpu/elementwise.h"

#include "tensor/cpu/elementwise_families.h"
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
  if (out_dt == a_dt && is_reduced_floating_point(a_dt)) {  // the bits as they are (a NaN's payload too)
    strided_apply(p, [](uint16_t x) { return x; }, static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a));
    return;
  }
  if (is_reduced_floating_point(out_dt) || is_reduced_floating_point(a_dt)) return copy_half(p, out_dt, out, a_dt, a);
  dispatch_compute(out_dt, "copy_", [&](auto to) {
    using O = typename decltype(to)::type;
    dispatch_compute(a_dt, "copy_", [&](auto from) {
      using I = typename decltype(from)::type;
      strided_apply(p, [](I x) { return static_cast<O>(x); }, static_cast<O*>(out), static_cast<const I*>(a));
    });
  });
}

void unary(UnaryOp op, const OpScalars& s, const StridedPlan& p, void* out, Dtype dt, const void* a) {
  if (is_reduced_floating_point(dt)) return unary_half(op, s, p, out, dt, a);
  dispatch_compute(dt, op_name(op), [&](auto tag) { unary_same<typename decltype(tag)::type>(op, s, p, out, a); });
}

void binary(BinaryOp op, const OpScalars& s, const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt, const void* a,
            Dtype b_dt, const void* b) {
  if (a_dt != b_dt || is_reduced_floating_point(a_dt)) return binary_half(op, s, p, out_dt, out, a_dt, a, b_dt, b);
  dispatch_compute(a_dt, op_name(op),
                   [&](auto tag) { binary_same<typename decltype(tag)::type>(op, s, p, out, a, b); });
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
