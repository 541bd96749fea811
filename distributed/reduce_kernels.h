// The elementwise reductions every CPU transport applies (gloo's TCP paths, shared memory, MPI's user
// ops): c = a op b over n elements, c may be a or b. Plain loops the compiler vectorizes; one function per
// (op, dtype), so that every rank folding the same inputs in the same order gets the same bits. MIN and
// MAX are the elementwise table's fn::Minimum and fn::Maximum (tensor/elementwise_ops.h): a NaN on any
// rank is NaN on every rank, as torch.minimum/maximum and NCCL. bfloat16 and float16 are reduced in
// float32 and rounded once per call (as NCCL's and gloo's half kernels); fold_f32 folds many inputs with
// one rounding at the end.
#pragma once

#include <cstddef>
#include <type_traits>

#include "common/check.h"
#include "distributed/work.h"
#include "tensor/dtype.h"
#include "tensor/elementwise_ops.h"

namespace lockstep::dist::detail {

// gloo's reduction callback's shape.
using ReduceFn = void (*)(void* c, const void* a, const void* b, size_t n);

template <typename T>
inline constexpr bool kReducedFloat = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;
// What an element is computed in: float32 for the 16-bit floats, else its own type.
template <typename T>
using Acc = std::conditional_t<kReducedFloat<T>, float, T>;

template <typename T>
void sum(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(Acc<T>(p[i]) + Acc<T>(q[i]));
}
template <typename T>
void product(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < n; ++i) x[i] = p[i] && q[i];  // the product of bools, as PyTorch's
  } else {
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(Acc<T>(p[i]) * Acc<T>(q[i]));
  }
}
// c = F(a, b) elementwise, F a functor of the elementwise table.
template <typename T, typename F>
void binary(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  const F f;
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(f(Acc<T>(p[i]), Acc<T>(q[i])));
}

// AVG reduces with SUM, then divides.
template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return &sum<T>;
    case ReduceOp::PRODUCT: return &product<T>;
    case ReduceOp::MIN: return &binary<T, fn::Minimum>;
    case ReduceOp::MAX: return &binary<T, fn::Maximum>;
  }
  fail("unknown reduce op ", int(op));
}

template <typename T>
inline void divide(T* p, size_t n, int by) {
  const Acc<T> d = static_cast<Acc<T>>(by);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(Acc<T>(p[i]) / d);
}

// out[0..n) = src[0] op ... op src[W-1] for 16-bit floats: converted to float32 a block at a time, folded
// there in rank order, divided by `divisor` where non-zero (AVG), and rounded once. `out` may be a source.
template <typename T>
void fold_f32(T* out, const T* const* src, size_t W, size_t n, ReduceOp op, int divisor = 0) {
  static_assert(kReducedFloat<T>);
  constexpr size_t kBlock = 1024;  // two float blocks stay in L1
  float acc[kBlock], next[kBlock];
  const ReduceFn fn = op == ReduceOp::AVG ? reduce_fn<float>(ReduceOp::SUM) : reduce_fn<float>(op);
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t len = n - at < kBlock ? n - at : kBlock;
    for (size_t i = 0; i < len; ++i) acc[i] = src[0][at + i];
    for (size_t k = 1; k < W; ++k) {
      for (size_t i = 0; i < len; ++i) next[i] = src[k][at + i];
      fn(acc, acc, next, len);
    }
    if (divisor) divide(acc, len, divisor);
    for (size_t i = 0; i < len; ++i) out[at + i] = T(acc[i]);
  }
}


}  // namespace lockstep::dist::detail
