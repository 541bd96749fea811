// The elementwise reductions every CPU transport applies (gloo's TCP paths, shared memory): c = a op b
// over n elements, c may be a or b. Plain loops the compiler vectorizes; one function per (op, dtype),
// so that every rank folding the same inputs in the same order gets the same bits. MIN and MAX are the
// elementwise table's fn::Minimum and fn::Maximum (tensor/elementwise_ops.h): a NaN on any rank is NaN
// on every rank, as torch.minimum/maximum and NCCL.
#pragma once

#include <cstddef>
#include <type_traits>

#include "common/check.h"
#include "distributed/work.h"
#include "tensor/elementwise_ops.h"

namespace lockstep::dist::detail {

// gloo's reduction callback's shape.
using ReduceFn = void (*)(void* c, const void* a, const void* b, size_t n);

template <typename T>
void sum(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) x[i] = p[i] + q[i];
}
template <typename T>
void product(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < n; ++i) x[i] = p[i] && q[i];  // the product of bools, as PyTorch's
  } else {
    for (size_t i = 0; i < n; ++i) x[i] = p[i] * q[i];
  }
}
// c = F(a, b) elementwise, F a functor of the elementwise table.
template <typename T, typename F>
void binary(void* c, const void* a, const void* b, size_t n) {
  auto *x = static_cast<T*>(c);
  auto *p = static_cast<const T*>(a), *q = static_cast<const T*>(b);
  const F f;
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(f(p[i], q[i]));
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
  const T d = static_cast<T>(by);
  for (size_t i = 0; i < n; ++i) p[i] /= d;
}


}  // namespace lockstep::dist::detail
