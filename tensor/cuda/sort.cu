// sort: each row of a [rows, n] sorted (stable) into values and int64 indices, ascending or descending.
// NaN sorts as larger than every number, as in torch.sort: last ascending, first descending. bfloat16
// and float16 are compared in float32 and moved as they are.
//
// One block per row runs a bottom-up merge sort in global memory, ping-ponging between the outputs and a
// scratch copy: pass w merges adjacent sorted runs of length w, each element finding its place in the
// merged run by a binary search in the other run (a left element goes after the right run's elements
// that sort strictly before it, a right element after the left run's that do not sort after it: equal
// keys keep their order, so the sort is stable). log2(n) passes of n binary searches: O(n log^2 n) work
// per row, spread over the block's threads, with one barrier per pass. Simple rather than fastest (a
// radix sort or CUB's segmented sort would be the next step for long rows).
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// Whether x sorts strictly before y (in their compute type: float32 for 16-bit values).
template <typename T, bool kDescending>
__device__ bool before(T x_in, T y_in) {
  const compute_t<T> x = ld(x_in), y = ld(y_in);
  if constexpr (std::is_floating_point_v<compute_t<T>>) {
    const bool xn = x != x, yn = y != y;
    if (xn || yn) return kDescending ? xn && !yn : !xn && yn;
  }
  if constexpr (kDescending) return y < x;
  else return x < y;
}

// values, indices, a: [rows, n]; tmp_v, tmp_i: scratch of the same size.
template <typename T, bool kDescending>
__global__ void sort_rows_kernel(T* values, int64_t* indices, const T* a, T* tmp_v, int64_t* tmp_i, int64_t rows,
                                 int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T *src_v = values + r * n, *dst_v = tmp_v + r * n;
    int64_t *src_i = indices + r * n, *dst_i = tmp_i + r * n;
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
      src_v[e] = a[r * n + e];
      src_i[e] = e;
    }
    __syncthreads();
    for (int64_t w = 1; w < n; w *= 2) {
      for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
        const int64_t start = e / (2 * w) * (2 * w), mid = min(start + w, n), end = min(start + 2 * w, n);
        const T x = src_v[e];
        int64_t lo, hi, pos;
        if (e < mid) {  // left run: count the right run's elements strictly before x
          lo = mid, hi = end;
          while (lo < hi) {
            const int64_t m = (lo + hi) / 2;
            if (before<T, kDescending>(src_v[m], x)) lo = m + 1;
            else hi = m;
          }
          pos = e + (lo - mid);
        } else {  // right run: count the left run's elements not after x
          lo = start, hi = mid;
          while (lo < hi) {
            const int64_t m = (lo + hi) / 2;
            if (!before<T, kDescending>(x, src_v[m])) lo = m + 1;
            else hi = m;
          }
          pos = start + (e - mid) + (lo - start);
        }
        dst_v[pos] = x;
        dst_i[pos] = src_i[e];
      }
      __syncthreads();
      T* tv = src_v;
      src_v = dst_v, dst_v = tv;
      int64_t* ti = src_i;
      src_i = dst_i, dst_i = ti;
    }
    if (src_v != values + r * n) {  // an odd number of passes ended in the scratch copy
      for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
        values[r * n + e] = src_v[e];
        indices[r * n + e] = src_i[e];
      }
    }
  }
}

}  // namespace

void CudaBackend::sort(Tensor& values, Tensor& indices, const Tensor& a, int64_t rows, int64_t n, bool descending) {
  LOCKSTEP_CHECK(rows >= 0 && n >= 0 && a.numel() == rows * n && values.numel() == rows * n &&
                     indices.numel() == rows * n,
                 "sort: [rows, n] = [", rows, ", ", n, "] does not match the input's ", a.numel(), " elements, or the ",
                 values.numel(), " values and ", indices.numel(), " indices");
  if (rows * n == 0) return;
  OnDevice on(values.device());
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Scratch tmp_v(rows * n * sizeof(T), on.ctx.device()), tmp_i(rows * n * sizeof(int64_t), on.ctx.device());
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
    auto launch = [&](auto kernel) {
      LOCKSTEP_LAUNCH("sort_rows_kernel", kernel, grid, block_for(n), on.stream(), values.data<T>(),
                      indices.data<int64_t>(), a.data<T>(), tmp_v.as<T>(), tmp_i.as<int64_t>(), rows, n);
    };
    if (descending) launch(sort_rows_kernel<T, true>);
    else launch(sort_rows_kernel<T, false>);
  });
}

}  // namespace lockstep::cuda::detail
