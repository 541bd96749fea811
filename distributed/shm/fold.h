// fold: W ranks' blocks reduced in rank order, block by block (ShmGroup's collectives, shm_group.cpp and
// shm_direct.cpp).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "distributed/reduce_kernels.h"
#include "distributed/work.h"

namespace lockstep::dist::shm {

// Elements folded per block: the partial result stays in L1.
constexpr size_t kFoldBlock = 2048;
// The most ranks a 16-bit float fold takes at once (their block pointers live on the stack).
constexpr size_t kMaxFoldRanks = 256;

// out[0..n) = src[0] op src[1] op ... op src[W-1], in that order, block by block, divided by
// `divisor` where it is non-zero (AVG). `tmp` (kFoldBlock elements) holds a block's partial result
// when `out` is one of the sources; `copy`, where given, receives the result too, while the block is
// still in L1. bfloat16 and float16 fold in float32 and round once (dist::detail::fold_f32).
template <typename T>
void fold(T* out, const std::vector<const T*>& src, size_t n, ReduceOp op, T* tmp, int divisor = 0,
          T* copy = nullptr) {
  const size_t W = src.size();
  const dist::detail::ReduceFn fn = dist::detail::reduce_fn<T>(op);
  for (size_t at = 0; at < n; at += kFoldBlock) {
    const size_t len = std::min(kFoldBlock, n - at);
    T* acc = tmp ? tmp : out + at;
    if constexpr (dist::detail::kReducedFloat<T>) {
      const T* block[kMaxFoldRanks];
      LOCKSTEP_CHECK(W <= kMaxFoldRanks, "shared memory: ", W, " ranks on one host fold 16-bit floats; at most ",
                     kMaxFoldRanks);
      for (size_t k = 0; k < W; ++k) block[k] = src[k] + at;
      dist::detail::fold_f32(acc, block, W, len, op, divisor);
      if (tmp) std::memcpy(out + at, tmp, len * sizeof(T));
      if (copy) std::memcpy(copy + at, acc, len * sizeof(T));
      continue;
    }
    fn(acc, src[0] + at, src[1] + at, len);
    for (size_t k = 2; k < W; ++k) fn(acc, acc, src[k] + at, len);
    if (divisor) dist::detail::divide(acc, len, divisor);
    if (tmp) std::memcpy(out + at, tmp, len * sizeof(T));
    if (copy) std::memcpy(copy + at, acc, len * sizeof(T));
  }
}

}  // namespace lockstep::dist::shm
