// Data movement by position, with positions read from an int64 tensor: index_select / index_add along
// the middle dimension of [outer, n, inner], gather / scatter_add / scatter (tensor/scatter_ops.h's rows)
// elementwise along it. Every index is checked on the device: an out-of-range one skips its read or
// write and is recorded, then raised at the next synchronization (device_error.h). The adds use atomics, since indices may repeat; bfloat16 and
// float16 destinations are added to at 16 bits (each add in float32, rounded once), as PyTorch's CUDA
// index_add_ and scatter_add_ do.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_error.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// Moves elements as raw words of their size: one instantiation per element size, not per dtype.
template <typename Fn>
void dispatch_word(Dtype d, Fn&& fn) {
  switch (element_size(d)) {
    case 1: return fn(type_tag<uint8_t>{});
    case 2: return fn(type_tag<uint16_t>{});
    case 4: return fn(type_tag<uint32_t>{});
    default: return fn(type_tag<uint64_t>{});
  }
}

// *p += v for every dtype a kernel computes in, atomically (indices may repeat): CUDA's atomicAdd for
// float, double and int32, its unsigned 64-bit overload for int64 (two's-complement addition is the same
// on unsigned words), and for the 1- and 2-byte integers (bool, uint8, int8, int16) a compare-and-swap on
// the aligned 32-bit word that holds the element (a word inside the same allocation: allocations are at
// least 4-byte aligned and sized). The sum is converted back to T, as the CPU backend does (the integers
// wrap, bool becomes "or").
__device__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}
template <typename T>
  requires(std::is_integral_v<T> && (sizeof(T) == 1 || sizeof(T) == 2))
__device__ void atomic_add(T* p, T v) {
  using Bits = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  unsigned* word = reinterpret_cast<unsigned*>(addr & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(addr & (4 - sizeof(T))) * 8, mask = sizeof(T) == 1 ? 0xffu : 0xffffu;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    const T sum = static_cast<T>(static_cast<T>((assumed >> shift) & mask) + v);
    const unsigned bits = static_cast<Bits>(sum);
    const unsigned updated = (assumed & ~(mask << shift)) | (bits << shift);
    old = atomicCAS(word, assumed, updated);
  } while (old != assumed);
}

// bfloat16 and float16: a compare-and-swap on the aligned 32-bit word that holds the element (inside
// the allocation, as above), the sum computed in float32 and rounded to 16 bits.
template <typename T>
  requires(std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>)
__device__ void atomic_add(T* p, T v) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  unsigned* word = reinterpret_cast<unsigned*>(addr & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(addr & 2) * 8;
  const float add = static_cast<float>(v);
  unsigned old = *word, assumed;
  do {
    assumed = old;
    T current;
    current.bits = static_cast<uint16_t>(assumed >> shift);
    const T sum = static_cast<T>(static_cast<float>(current) + add);
    const unsigned updated = (assumed & ~(0xffffu << shift)) | (static_cast<unsigned>(sum.bits) << shift);
    old = atomicCAS(word, assumed, updated);
  } while (old != assumed);
}

// *p = R::apply(*p, v), atomically (indices may repeat), for every dtype: a compare-and-swap loop on the
// element's own 32- or 64-bit word, or for 1- and 2-byte types on the aligned 32-bit word that holds it
// (inside the allocation, as above). The rule computes in compute_t<T>; a value it leaves unchanged
// (an amax that loses) writes nothing.
// T's bits as the unsigned word W of its size and back (16-bit floats through their .bits).
template <typename T>
constexpr bool kHalf = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;
template <typename T, typename W>
__device__ T from_bits(W w) {
  T t;
  if constexpr (kHalf<T>) t.bits = w;
  else memcpy(&t, &w, sizeof(T));
  return t;
}
template <typename W, typename T>
__device__ W to_bits(T t) {
  if constexpr (kHalf<T>) return t.bits;
  W w;
  memcpy(&w, &t, sizeof(T));
  return w;
}

template <typename T, typename R>
__device__ void atomic_apply(T* p, T v) {
  using C = compute_t<T>;
  const C x = static_cast<C>(v);
  auto next_of = [&](T current) { return static_cast<T>(R::apply(static_cast<C>(current), x)); };
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    using W = std::conditional_t<sizeof(T) == 8, unsigned long long, unsigned>;
    W* word = reinterpret_cast<W*>(p);
    W old = *word, assumed;
    do {
      assumed = old;
      const W updated = to_bits<W>(next_of(from_bits<T>(assumed)));
      if (updated == assumed) return;
      old = atomicCAS(word, assumed, updated);
    } while (old != assumed);
  } else {
    using Bits = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    unsigned* word = reinterpret_cast<unsigned*>(addr & ~uintptr_t{3});
    const unsigned shift = static_cast<unsigned>(addr & 3) * 8, mask = sizeof(T) == 1 ? 0xffu : 0xffffu;
    unsigned old = *word, assumed;
    do {
      assumed = old;
      const T current = from_bits<T>(static_cast<Bits>((assumed >> shift) & mask));
      const Bits next_bits = to_bits<Bits>(next_of(current));
      const unsigned updated = (assumed & ~(mask << shift)) | (static_cast<unsigned>(next_bits) << shift);
      if (updated == assumed) return;
      old = atomicCAS(word, assumed, updated);
    } while (old != assumed);
  }
}

// The four moves in one kernel, between the small side [outer, k, inner] (element e) and the big side
// [outer, n, inner] (row r): r = index[j] for the whole row j of the small side (kPerRow: index_select,
// index_add), or r = index[e] for each element (gather, scatter_add), or with row_index (scatter_add's
// [outer, k] index) r = index[e / inner]. kAdd adds the small side into the big one (dst; atomically:
// indices repeat), else the big side is copied into the small one (dst).
template <typename T, bool kPerRow, bool kAdd>
__global__ void index_kernel(T* dst, const T* src, const int64_t* index, int64_t outer, int64_t k, int64_t n,
                             int64_t inner, bool row_index, IndexErrorKind kind, IndexError* err) {
  LOCKSTEP_GRID_STRIDE(e, outer * k * inner) {
    const int64_t i = e % inner, j = kPerRow ? e / inner % k : row_index ? e / inner : e, o = e / (inner * k),
                  r = index[j];
    if (!index_ok(err, kind, j, r, n)) continue;
    const int64_t big = (o * n + r) * inner + i;
    if constexpr (kAdd) atomic_add(&dst[big], src[e]);
    else dst[e] = src[big];
  }
}

// Only checks the indices: index_select / index_add where no element moves (outer or inner is 0).
__global__ void index_check_kernel(const int64_t* index, int64_t k, int64_t n, IndexErrorKind kind, IndexError* err) {
  LOCKSTEP_GRID_STRIDE(j, k) index_ok(err, kind, j, index[j], n);
}

// Runs index_kernel with the device's error record: the adds per dtype, the copies per word size.
template <bool kPerRow, bool kAdd>
void launch_index(Tensor& dst, const Tensor& src, const Tensor& index, int64_t outer, int64_t k, int64_t n,
                  int64_t inner, IndexErrorKind kind, bool row_index = false) {
  OnDevice on(dst.device());
  on.ctx.launch_checked([&](IndexError* err) {
    if (outer * inner == 0) {
      LOCKSTEP_LAUNCH("index_check_kernel", index_check_kernel, grid_for(k, on.ctx), kThreads, on.stream(),
                      index.data<int64_t>(), k, n, kind, err);
      return;
    }
    auto run = [&](auto tag) {
      using T = typename decltype(tag)::type;
      LOCKSTEP_LAUNCH("index_kernel", index_kernel<T, kPerRow, kAdd>, grid_for(outer * k * inner, on.ctx), kThreads,
                      on.stream(), static_cast<T*>(dst.data_ptr()), static_cast<const T*>(src.data_ptr()),
                      index.data<int64_t>(), outer, k, n, inner, row_index, kind, err);
    };
    if constexpr (kAdd) dispatch(dst.dtype(), run);
    else dispatch_word(src.dtype(), run);
  });
}

// scatter's rows (tensor/scatter_ops.h), elementwise as scatter_add: dst [outer, n, inner] at row
// index[e] of element e of src [outer, k, inner]. Assign stores (a repeated index keeps any one value,
// as PyTorch's); the reductions apply their rule atomically.
template <typename T, Scatter Op>
__global__ void scatter_kernel(T* dst, const T* src, const int64_t* index, int64_t outer, int64_t k, int64_t n,
                               int64_t inner, bool row_index, IndexErrorKind kind, IndexError* err) {
  LOCKSTEP_GRID_STRIDE(e, outer * k * inner) {
    const int64_t i = e % inner, o = e / (inner * k), at = row_index ? e / inner : e, r = index[at];
    if (!index_ok(err, kind, at, r, n)) continue;
    const int64_t big = (o * n + r) * inner + i;
    if constexpr (Op == Scatter::Assign) dst[big] = src[e];
    else atomic_apply<T, ScatterRule<Op, compute_t<T>>>(&dst[big], src[e]);
  }
}

void check_dims(const char* op, int64_t outer, int64_t n, int64_t inner, const Tensor& big, const Tensor& small,
                int64_t k) {
  LOCKSTEP_CHECK(outer >= 0 && n >= 0 && inner >= 0 && big.numel() == outer * n * inner &&
                     small.numel() == outer * k * inner,
                 op, ": [outer, n, inner] = [", outer, ", ", n, ", ", inner, "] with k = ", k, " does not match ",
                 big.numel(), " and ", small.numel(), " elements");
}

}  // namespace

void CudaBackend::index_select(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n,
                               int64_t inner) {
  const int64_t k = index.numel();
  check_dims("index_select", outer, n, inner, a, out, k);
  if (k > 0) launch_index<true, false>(out, a, index, outer, k, n, inner, IndexErrorKind::IndexSelect);
}

void CudaBackend::index_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                            int64_t inner) {
  const int64_t k = index.numel();
  check_dims("index_add_", outer, n, inner, out, src, k);
  if (k > 0) launch_index<true, true>(out, src, index, outer, k, n, inner, IndexErrorKind::IndexAdd);
}

void CudaBackend::gather(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n, int64_t inner) {
  const int64_t k = outer * inner == 0 ? 0 : index.numel() / (outer * inner);
  check_dims("gather", outer, n, inner, a, index, k);
  LOCKSTEP_CHECK(out.numel() == index.numel(), "gather: output of ", out.numel(), " elements for an index of ",
                 index.numel());
  if (index.numel() > 0) launch_index<false, false>(out, a, index, outer, k, n, inner, IndexErrorKind::Gather);
}

// The scatters' index: one per element of src [outer, k, inner], or one per row ([outer, k]).
static bool row_index_of(const char* op, const Tensor& index, const Tensor& src, int64_t outer, int64_t k, int64_t inner) {
  const bool per_row = inner > 1 && index.numel() == outer * k;
  LOCKSTEP_CHECK(per_row || index.numel() == src.numel(), op, ": an index of ", index.numel(), " elements for a source ",
                 "of ", src.numel(), " ([outer, k, inner] = [", outer, ", ", k, ", ", inner, "])");
  return per_row;
}

void CudaBackend::scatter_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                              int64_t inner) {
  const int64_t k = outer * inner == 0 ? 0 : src.numel() / (outer * inner);
  check_dims("scatter_add_", outer, n, inner, out, src, k);
  const bool row_index = row_index_of("scatter_add_", index, src, outer, k, inner);
  if (src.numel() > 0)
    launch_index<false, true>(out, src, index, outer, k, n, inner, IndexErrorKind::ScatterAdd, row_index);
}

void CudaBackend::scatter(Scatter op, Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                          int64_t inner) {
  const char* name = scatter_name(op);
  const int64_t k = outer * inner == 0 ? 0 : src.numel() / (outer * inner);
  check_dims(name, outer, n, inner, out, src, k);
  const bool row_index = row_index_of(name, index, src, outer, k, inner);
  if (src.numel() == 0) return;
  const IndexErrorKind kind = op == Scatter::Assign ? IndexErrorKind::Scatter : IndexErrorKind::ScatterReduce;
  OnDevice on(out.device());
  visit_scatter(op, [&](auto s, auto kinds) {
    dispatch(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!op_accepts<decltype(kinds)::value, T>()) {
        fail(name, ": not defined for ", dtype_name(out.dtype()), " tensors");
      } else {
        on.ctx.launch_checked([&](IndexError* err) {
          LOCKSTEP_LAUNCH("scatter_kernel", scatter_kernel<T, decltype(s)::value>, grid_for(src.numel(), on.ctx),
                          kThreads, on.stream(), out.data<T>(), src.data<T>(), index.data<int64_t>(), outer, k, n,
                          inner, row_index, kind, err);
        });
      }
    });
  });
}

}  // namespace lockstep::cuda::detail
