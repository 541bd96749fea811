// Reductions over the middle dimension of [outer, n, inner] (contiguous): sum, mean, max, min, argmax,
// argmin, with the CPU backend's rules: float sums accumulate in double (integer ones in int64), NaN
// propagates through max and min, and argmax/argmin give the first NaN, else the first extreme.
//
// Two kernels, by layout: reduce_rows (inner == 1: each output is a contiguous row, reduced by one
// block) and reduce_cols (inner > 1: 32 adjacent outputs per block, so loads are coalesced, with 8
// threads down each column). When there are too few outputs to fill the GPU (the all-elements sum is
// one output) each one is split over several blocks (`splits`), which write partial accumulators;
// a second launch of the same kernel reduces those.
#include <cmath>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/elementwise_ops.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// A reduction: Acc, the identity, how an element enters (lift, with its position k along n), how two
// accumulators combine (commutative: blocks finish in any order), and the output.
template <typename T, ReduceOp Op>
struct Reducer;

// Sums accumulate in double for floating point (a long float32 sum loses digits) and in int64 for
// integers (a uint8 sum wraps only once, at the end, as PyTorch's sum cast back to uint8 would).
template <typename T, ReduceOp Op>
  requires(Op == ReduceOp::Sum || Op == ReduceOp::Mean)
struct Reducer<T, Op> {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  using Out = T;
  __device__ static Acc identity() { return Acc(0); }
  __device__ static Acc lift(T v, int64_t) { return Acc(v); }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static Out finish(Acc a, int64_t n) {
    if constexpr (Op == ReduceOp::Mean) return static_cast<T>(a / static_cast<Acc>(n));
    else return static_cast<T>(a);
  }
};

// A candidate extreme and its position along n; index -1: no element yet (so no identity value is
// needed for any dtype).
template <typename T>
struct ArgAcc {
  T value;
  int64_t index;
};

// max/min and argmax/argmin share one rule: a NaN beats any number and the first NaN wins (so max and
// min propagate NaN, as torch.max), else the larger (smaller) value, else the earlier position.
template <typename T, ReduceOp Op>
  requires(Op == ReduceOp::Max || Op == ReduceOp::Min || Op == ReduceOp::Argmax || Op == ReduceOp::Argmin)
struct Reducer<T, Op> {
  static constexpr bool kMax = Op == ReduceOp::Max || Op == ReduceOp::Argmax;
  static constexpr bool kArg = Op == ReduceOp::Argmax || Op == ReduceOp::Argmin;
  using Acc = ArgAcc<T>;
  using Out = std::conditional_t<kArg, int64_t, T>;
  __device__ static Acc identity() { return {T(0), -1}; }
  __device__ static Acc lift(T v, int64_t k) { return {v, k}; }
  __device__ static Acc combine(Acc a, Acc b) {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool an = fn::is_nan(a.value), bn = fn::is_nan(b.value);
    if (an != bn) return an ? a : b;
    if (!an && a.value != b.value) return (kMax ? b.value < a.value : a.value < b.value) ? a : b;
    return a.index < b.index ? a : b;
  }
  __device__ static Out finish(Acc a, int64_t) {
    if constexpr (kArg) return a.index;
    else return a.value;
  }
};

// Reads element k of the reduced dimension: an input value on the first pass, a partial on the second.
template <typename R, bool kPartial, typename In>
__device__ typename R::Acc load(const In& v, int64_t k) {
  if constexpr (kPartial) return v;
  else return R::lift(v, k);
}

// inner == 1. grid: (splits, rows); block b of a row reduces elements [b * chunk, (b + 1) * chunk).
// With one split it writes out[o]; otherwise partial[o * splits + b]. `count` is n for the mean.
template <typename T, ReduceOp Op, bool kPartial>
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
template <typename T, ReduceOp Op, bool kPartial>
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

template <typename T, ReduceOp Op>
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

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Argmax: return "argmax";
    case ReduceOp::Argmin: return "argmin";
  }
  return "reduce";
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) {
  const char* name = reduce_name(op);
  LOCKSTEP_CHECK(outer >= 0 && n >= 0 && inner >= 0 && outer * n * inner == a.numel() && outer * inner == out.numel(),
                 name, ": [outer, n, inner] = [", outer, ", ", n, ", ", inner, "] does not match the input's ",
                 a.numel(), " elements and the output's ", out.numel());
  if (outer * inner == 0) return;
  const bool extreme = op != ReduceOp::Sum && op != ReduceOp::Mean;
  LOCKSTEP_CHECK(n > 0 || !extreme, name, ": cannot reduce over a dimension of size 0 (it has no ", name, ")");
  if (n == 0) {  // the empty sum is 0, the empty mean 0/0
    StridedPlan p;
    p.nd = 1;
    p.numel = p.shape[0] = outer * inner;
    p.stride[0][0] = 1;
    return fill(p, out, op == ReduceOp::Sum ? 0.0 : NAN);
  }
  OnDevice on(out.device());
  dispatch_compute(a.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = a.data<T>();
    switch (op) {
      case ReduceOp::Sum:
        if constexpr (!std::is_same_v<T, bool>)
          return run_reduce<T, ReduceOp::Sum>(on.ctx, x, out.data<T>(), outer, n, inner);
        break;
      case ReduceOp::Mean:
        if constexpr (std::is_floating_point_v<T>)
          return run_reduce<T, ReduceOp::Mean>(on.ctx, x, out.data<T>(), outer, n, inner);
        break;
      case ReduceOp::Max: return run_reduce<T, ReduceOp::Max>(on.ctx, x, out.data<T>(), outer, n, inner);
      case ReduceOp::Min: return run_reduce<T, ReduceOp::Min>(on.ctx, x, out.data<T>(), outer, n, inner);
      case ReduceOp::Argmax: return run_reduce<T, ReduceOp::Argmax>(on.ctx, x, out.data<int64_t>(), outer, n, inner);
      case ReduceOp::Argmin: return run_reduce<T, ReduceOp::Argmin>(on.ctx, x, out.data<int64_t>(), outer, n, inner);
    }
    fail(name, ": not defined for ", dtype_name(a.dtype()), " tensors");
  });
}

}  // namespace lockstep::cuda::detail
