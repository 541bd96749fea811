// Reductions over the middle dimension of [outer, n, inner] (contiguous): every row of
// tensor/reduce_ops.h, by the rule the CPU loops use (accumulator, NaN rule), so the devices agree.
//
// Two kernels, by layout: reduce_rows (inner == 1: each output is a contiguous row, reduced by one
// block) and reduce_cols (inner > 1: 32 adjacent outputs per block, so loads are coalesced, with 8
// threads down each column). When there are too few outputs to fill the GPU (the all-elements sum is
// one output) each one is split over several blocks (`splits`), which write partial accumulators;
// a second launch of the same kernel reduces those.
//
// bfloat16 and float16 are read at 16 bits, every row: sum, mean and prod by their own rules (double
// accumulators, rounded once), the others by the float32 rule on each element loaded into float32.
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/reduce_ops.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// The rule of a row (tensor/reduce_ops.h): the same Acc, lift, combine and finish as the CPU loops; a
// 16-bit T is read as it is and computed in compute_t<T> by every rule.
template <typename T, Reduction Op>
using Reducer = ReduceRule<Op, T>;

// Reads element k of the reduced dimension: an input value on the first pass, a partial on the second.
template <typename R, bool kPartial, typename In>
__device__ typename R::Acc load(const In& v, int64_t k) {
  if constexpr (kPartial) return v;
  else return R::lift(v, k);
}

// inner == 1. grid: (splits, rows); block b of a row reduces elements [b * chunk, (b + 1) * chunk).
// With one split it writes out[o]; otherwise partial[o * splits + b]. `count` is n for the mean.
template <typename T, Reduction Op, bool kPartial>
__global__ void reduce_rows(const std::conditional_t<kPartial, typename Reducer<T, Op>::Acc, T>* x, int64_t outer,
                            int64_t n, int64_t chunk, typename Reducer<T, Op>::Acc* partial,
                            typename Reducer<T, Op>::Out* out, int64_t count) {
  using R = Reducer<T, Op>;
  using Acc = typename R::Acc;
  __shared__ Acc smem[kThreads];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk, end = min(n, begin + chunk);
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    Acc acc = R::identity();
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x)
      acc = R::combine(acc, load<R, kPartial>(x[o * n + k], k));
    acc = block_reduce(acc, [](Acc a, Acc b) { return R::combine(a, b); }, smem);
    if (threadIdx.x == 0) {
      if (gridDim.x == 1) out[o] = R::finish(acc, count);
      else partial[o * gridDim.x + blockIdx.x] = acc;
    }
  }
}

constexpr int kColWidth = 32, kColDepth = 8;  // reduce_cols' block: 32 columns x 8 threads down each

// inner > 1. grid: (column groups, outer, splits); block z reduces positions [z * chunk, (z + 1) * chunk)
// of its 32 columns. With one split it writes out[o, i]; otherwise partial[o, z, i].
template <typename T, Reduction Op, bool kPartial>
__global__ void reduce_cols(const std::conditional_t<kPartial, typename Reducer<T, Op>::Acc, T>* x, int64_t outer,
                            int64_t n, int64_t inner, int64_t chunk, typename Reducer<T, Op>::Acc* partial,
                            typename Reducer<T, Op>::Out* out, int64_t count) {
  using R = Reducer<T, Op>;
  using Acc = typename R::Acc;
  __shared__ Acc smem[kColDepth][kColWidth];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kColWidth + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.z) * chunk, end = min(n, begin + chunk);
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    Acc acc = R::identity();
    if (i < inner)
      for (int64_t k = begin + threadIdx.y; k < end; k += kColDepth)
        acc = R::combine(acc, load<R, kPartial>(x[(o * n + k) * inner + i], k));
    smem[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      for (int y = 1; y < kColDepth; ++y) acc = R::combine(acc, smem[y][threadIdx.x]);
      if (gridDim.z == 1) out[o * inner + i] = R::finish(acc, count);
      else partial[(o * gridDim.z + blockIdx.z) * inner + i] = acc;
    }
    __syncthreads();
  }
}

constexpr int64_t kMaxGridY = 65535;

template <typename T, Reduction Op>
void run_reduce(DeviceContext& ctx, const T* x, typename Reducer<T, Op>::Out* out, int64_t outer, int64_t n,
                int64_t inner) {
  using Acc = typename Reducer<T, Op>::Acc;
  const int64_t target_blocks = 4 * int64_t{ctx.sm_count()};
  const unsigned grid_y = static_cast<unsigned>(std::min(outer, kMaxGridY));
  if (inner == 1) {
    // Split rows when there are too few to fill the GPU, keeping >= 4096 elements per block.
    int64_t splits = 1;
    if (outer < target_blocks / 2)
      splits = std::clamp<int64_t>(std::min(n / 4096, ceil_div(target_blocks, outer)), 1, 1024);
    const int64_t chunk = ceil_div(n, splits);
    splits = ceil_div(n, chunk);
    const int threads = block_for(chunk);
    if (splits == 1) {
      LOCKSTEP_LAUNCH("reduce_rows", reduce_rows<T, Op, false>, dim3(1, grid_y), threads, ctx.stream(), x, outer, n, n,
                      nullptr, out, n);
      return;
    }
    Scratch partial(outer * splits * sizeof(Acc), ctx.device());
    LOCKSTEP_LAUNCH("reduce_rows", reduce_rows<T, Op, false>, dim3(static_cast<unsigned>(splits), grid_y), threads,
                    ctx.stream(), x, outer, n, chunk, partial.as<Acc>(), out, n);
    LOCKSTEP_LAUNCH("reduce_rows (partials)", reduce_rows<T, Op, true>, dim3(1, grid_y), block_for(splits),
                    ctx.stream(), partial.as<Acc>(), outer, splits, splits, nullptr, out, n);
    return;
  }
  const int64_t groups = ceil_div(inner, kColWidth), blocks = groups * outer;
  // Likewise for columns, keeping >= 256 positions per block.
  int64_t splits = 1;
  if (blocks < target_blocks / 2)
    splits = std::clamp<int64_t>(std::min(n / 256, ceil_div(target_blocks, blocks)), 1, 1024);
  const int64_t chunk = ceil_div(n, splits);
  splits = ceil_div(n, chunk);
  const dim3 block(kColWidth, kColDepth);
  if (splits == 1) {
    LOCKSTEP_LAUNCH("reduce_cols", reduce_cols<T, Op, false>, dim3(static_cast<unsigned>(groups), grid_y, 1), block,
                    ctx.stream(), x, outer, n, inner, n, nullptr, out, n);
    return;
  }
  Scratch partial(outer * splits * inner * sizeof(Acc), ctx.device());
  LOCKSTEP_LAUNCH("reduce_cols", reduce_cols<T, Op, false>,
                  dim3(static_cast<unsigned>(groups), grid_y, static_cast<unsigned>(splits)), block, ctx.stream(), x,
                  outer, n, inner, chunk, partial.as<Acc>(), out, n);
  LOCKSTEP_LAUNCH("reduce_cols (partials)", reduce_cols<T, Op, true>, dim3(static_cast<unsigned>(groups), grid_y, 1),
                  block, ctx.stream(), partial.as<Acc>(), outer, splits, inner, splits, nullptr, out, n);
}

}  // namespace

void CudaBackend::reduce(Reduction op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) {
  const char* name = reduction_name(op);
  LOCKSTEP_CHECK(outer >= 0 && n >= 0 && inner >= 0 && outer * n * inner == a.numel() && outer * inner == out.numel(),
                 name, ": [outer, n, inner] = [", outer, ", ", n, ", ", inner, "] does not match the input's ",
                 a.numel(), " elements and the output's ", out.numel());
  if (outer * inner == 0) return;
  const ReductionInfo info = reduction_info(op);
  LOCKSTEP_CHECK(n > 0 || info.empty_ok, name, ": cannot reduce over a dimension of size 0 (it has no ", name, ")");
  if (n == 0) {  // the rule's value over no elements: 0 for sum, 0/0 for mean, 1 for prod
    StridedPlan p;
    p.nd = 1;
    p.numel = p.shape[0] = outer * inner;
    p.stride[0][0] = 1;
    return fill(p, out, info.empty_value);
  }
  OnDevice on(out.device());
  visit_reduction(op, [&](auto r, auto kinds) {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!op_accepts<decltype(kinds)::value, T>()) {
        fail(name, ": not defined for ", dtype_name(a.dtype()), " tensors");
      } else {
        constexpr Reduction R = decltype(r)::value;
        run_reduce<T, R>(on.ctx, a.data<T>(), out.data<typename Reducer<T, R>::Out>(), outer, n, inner);
      }
    });
  });
}

}  // namespace lockstep::cuda::detail
