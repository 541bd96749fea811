// Scans along the middle dimension of [outer, n, inner] (contiguous): every row of tensor/scan_ops.h,
// by the rule the CPU loops use (accumulator, order, NaN and tie rules), so the devices agree.
//
// A straightforward kernel: one thread per (outer, inner) column, walking its n elements in order, as
// the rules are written (sequential, no associative combine) and as the CPU walks them. Adjacent
// threads take adjacent columns, so for inner > 1 a warp's loads and stores are coalesced; for
// inner == 1 each thread walks its own row (a strided access across the warp), and a single long row is
// one thread's work. A block-wide scan (partial scans per thread, then a scan of their totals) would be
// the step for long rows, at the price of an order the CPU does not share.
//
// bfloat16 and float16 are read and written at 16 bits and computed in float32 by every rule.
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/scan_ops.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// Column c = (o, i) of x: positions o * n * inner + k * inner + i for k from first, in steps of dir.
// idx is written by index rows only (null for the others).
template <typename T, Scan Op>
__global__ void scan_columns(const T* x, T* y, int64_t* idx, int64_t outer, int64_t n, int64_t inner,
                             int64_t first, int64_t dir) {
  using R = ScanRule<Op, T>;
  LOCKSTEP_GRID_STRIDE(c, outer * inner) {
    const int64_t base = c / inner * n * inner + c % inner;
    int64_t k = first, at = base + k * inner;
    typename R::Acc acc = R::lift(x[at], k);
    y[at] = R::finish(acc);
    if constexpr (R::kIndex) idx[at] = R::index(acc);
    for (int64_t s = 1; s < n; ++s) {
      k += dir;
      at = base + k * inner;
      acc = R::next(acc, x[at], k);
      y[at] = R::finish(acc);
      if constexpr (R::kIndex) idx[at] = R::index(acc);
    }
  }
}

}  // namespace

void CudaBackend::scan(Scan op, Tensor& out, Tensor& indices, const Tensor& a, int64_t outer, int64_t n,
                       int64_t inner, bool reverse) {
  const char* name = scan_name(op);
  LOCKSTEP_CHECK(outer >= 0 && n > 0 && inner >= 0 && outer * n * inner == a.numel() && out.numel() == a.numel(),
                 name, ": [outer, n, inner] = [", outer, ", ", n, ", ", inner, "] does not match the input's ",
                 a.numel(), " elements and the output's ", out.numel());
  if (outer * inner == 0) return;
  OnDevice on(out.device());
  visit_scan(op, [&](auto s, auto kinds) {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!op_accepts<decltype(kinds)::value, T>()) {
        fail(name, ": not defined for ", dtype_name(a.dtype()), " tensors");
      } else {
        constexpr Scan S = decltype(s)::value;
        int64_t* idx = nullptr;
        if constexpr (ScanRule<S, T>::kIndex) idx = indices.data<int64_t>();
        const int64_t columns = outer * inner;
        LOCKSTEP_LAUNCH("scan", scan_columns<T, S>, grid_for(columns, on.ctx), kThreads, on.ctx.stream(),
                        a.data<T>(), out.data<T>(), idx, outer, n, inner, reverse ? n - 1 : int64_t{0},
                        reverse ? int64_t{-1} : int64_t{1});
      }
    });
  });
}

}  // namespace lockstep::cuda::detail
