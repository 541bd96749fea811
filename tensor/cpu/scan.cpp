// The CPU's scans (tensor/cpu/scan.h), one loop per layout, instantiated per row of
// tensor/scan_ops.h. Every column is walked in order by its rule, as the CUDA kernel walks it, so the
// devices agree element for element; what the layouts choose is which columns advance together.
//
// inner == 1: each column is a contiguous row, and a row's steps form one dependency chain (an add's
// latency per element, which is all PyTorch's one-row-at-a-time loop reaches). kRows rows advance
// together instead, so their chains overlap.
// inner > 1: up to kBlock adjacent columns of one outer index advance together, one row of them per
// step, their running values in a stack array: contiguous loads and stores, which the compiler
// vectorizes for cumsum and cumprod (PyTorch walks each strided column on its own).
// Compiled once per ISA (tensor/cpu/isa.h); every header is included before LOCKSTEP_ISA_BEGIN.
#include "tensor/cpu/scan.h"

#include <algorithm>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/rows.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

constexpr int64_t kBlock = 256;  // columns per task when inner > 1
constexpr int kRows = 8;         // rows advancing together when inner == 1

// Step s of a walk along n: position s, or n - 1 - s for a reversed scan.
struct Walk {
  int64_t first, dir;
  int64_t at(int64_t s) const { return first + dir * s; }
};

// kCount rows of n contiguous elements from x (and y, idx), scanned together.
template <typename R, int kCount, typename T>
void scan_rows(const T* __restrict x, T* __restrict y, int64_t* __restrict idx, int64_t n, Walk w) {
  typename R::Acc acc[kCount];
  int64_t k = w.at(0);
  for (int r = 0; r < kCount; ++r) {
    acc[r] = R::lift(x[r * n + k], k);
    y[r * n + k] = R::finish(acc[r]);
    if constexpr (R::kIndex) idx[r * n + k] = R::index(acc[r]);
  }
  for (int64_t s = 1; s < n; ++s) {
    k = w.at(s);
    for (int r = 0; r < kCount; ++r) {
      acc[r] = R::next(acc[r], x[r * n + k], k);
      y[r * n + k] = R::finish(acc[r]);
      if constexpr (R::kIndex) idx[r * n + k] = R::index(acc[r]);
    }
  }
}

// Columns [0, m) of x (rows of stride inner), m <= kBlock, each scanned along n.
template <typename R, typename T>
void scan_block(const T* __restrict x, T* __restrict y, int64_t* __restrict idx, int64_t n, int64_t inner,
                int64_t m, Walk w) {
  typename R::Acc acc[kBlock];
  int64_t k = w.at(0);
  const T* row = x + k * inner;
  T* out = y + k * inner;
  for (int64_t j = 0; j < m; ++j) {
    acc[j] = R::lift(row[j], k);
    out[j] = R::finish(acc[j]);
  }
  if constexpr (R::kIndex)
    for (int64_t j = 0; j < m; ++j) idx[k * inner + j] = R::index(acc[j]);
  for (int64_t s = 1; s < n; ++s) {
    k = w.at(s);
    row = x + k * inner;
    out = y + k * inner;
    for (int64_t j = 0; j < m; ++j) {
      acc[j] = R::next(acc[j], row[j], k);
      out[j] = R::finish(acc[j]);
    }
    if constexpr (R::kIndex)
      for (int64_t j = 0; j < m; ++j) idx[k * inner + j] = R::index(acc[j]);
  }
}

template <typename R, typename T>
void scan_all(const T* x, T* y, int64_t* idx, int64_t outer, int64_t n, int64_t inner, bool reverse) {
  const Walk w{reverse ? n - 1 : 0, reverse ? -1 : 1};
  // Index pointers only where the row writes them (no offset arithmetic on a null pointer).
  auto idx_at = [idx](int64_t off) { return idx ? idx + off : nullptr; };
  if (inner == 1) {
    const int64_t groups = (outer + kRows - 1) / kRows;
    parallel_for(0, groups, std::max<int64_t>(1, kRowGrain / (std::max<int64_t>(n, 1) * kRows)), [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * kRows, count = std::min<int64_t>(kRows, outer - r0);
        if (count == kRows) {
          scan_rows<R, kRows>(x + r0 * n, y + r0 * n, idx_at(r0 * n), n, w);
          continue;
        }
        for (int64_t r = r0; r < r0 + count; ++r) scan_rows<R, 1>(x + r * n, y + r * n, idx_at(r * n), n, w);
      }
    });
    return;
  }
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kRowGrain / (std::max<int64_t>(n, 1) * std::min(inner, kBlock)));
  parallel_for(0, outer * blocks, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / blocks, i0 = t % blocks * kBlock, off = o * n * inner + i0;
      scan_block<R>(x + off, y + off, idx_at(off), n, inner, std::min(kBlock, inner - i0), w);
    }
  });
}

}  // namespace

void scan(Scan op, Dtype dtype, const void* x, void* out, int64_t* indices, int64_t outer, int64_t n,
          int64_t inner, bool reverse) {
  visit_scan(op, [&](auto s, auto kinds) {
    dispatch(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!op_accepts<decltype(kinds)::value, T>()) {
        fail(scan_name(op), ": not defined for ", dtype_name(dtype), " tensors");
      } else {
        using R = ScanRule<decltype(s)::value, T>;
        scan_all<R>(static_cast<const T*>(x), static_cast<T*>(out), indices, outer, n, inner, reverse);
      }
    });
  });
}

LOCKSTEP_ISA_END
