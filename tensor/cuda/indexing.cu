// Data movement by position: 2-D transpose (through shared-memory tiles, so both the reads and the
// writes are coalesced), and index_select / index_add over rows, whose indices come from a tensor and
// are checked on the device (device_error.h).
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_error.cuh"
#include "tensor/cuda/launch.cuh"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// Moves elements as raw words of their size: one instantiation per element size, not per dtype.
template <typename Fn>
void dispatch_word(Dtype d, Fn&& fn) {
  if (element_size(d) == 4) fn(type_tag<uint32_t>{});
  else fn(type_tag<uint64_t>{});
}

constexpr int kTile = 32, kTileRows = 8;  // a 32x32 tile, moved by 32x8 threads

// a: [rows, cols] -> out: [cols, rows]. grid.x walks column tiles, grid.y (and the loop) row tiles.
template <typename W>
__global__ void transpose_kernel(W* out, const W* a, int64_t rows, int64_t cols) {
  __shared__ W tile[kTile][kTile + 1];  // +1: no bank conflicts when reading a column
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * kTile;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile; r0 < rows; r0 += row_step) {
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[j][threadIdx.x] = a[r * cols + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t c = c0 + j, r = r0 + threadIdx.x;  // out[c, r] = a[r, c]
      if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

// out: [k, inner] = a[index[i]] for each row i; a: [rows, inner].
template <typename W>
__global__ void index_select_kernel(W* out, const W* a, const int64_t* index, int64_t k, int64_t inner, int64_t rows,
                                    IndexError* err) {
  LOCKSTEP_GRID_STRIDE(e, k * inner) {
    const int64_t i = e / inner, j = e - i * inner, r = index[i];
    if (index_ok(err, IndexErrorKind::IndexSelect, i, r, rows)) out[e] = a[r * inner + j];
  }
}

// Only checks the indices: index_select of rows that have no elements.
__global__ void index_check_kernel(const int64_t* index, int64_t k, int64_t rows, IndexErrorKind kind,
                                   IndexError* err) {
  LOCKSTEP_GRID_STRIDE(i, k) index_ok(err, kind, i, index[i], rows);
}

__device__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ void atomic_add(int64_t* p, int64_t v) {
  // Two's-complement addition is the same on unsigned words.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// out[index[i]] += src[i] for each row i; out: [rows, inner], src: [k, inner]. Rows may repeat.
template <typename T>
__global__ void index_add_kernel(T* out, const int64_t* index, const T* src, int64_t k, int64_t inner, int64_t rows,
                                 IndexError* err) {
  LOCKSTEP_GRID_STRIDE(e, k * inner) {
    const int64_t i = e / inner, j = e - i * inner, r = index[i];
    if (index_ok(err, IndexErrorKind::IndexAdd, i, r, rows)) atomic_add(&out[r * inner + j], src[e]);
  }
}

int64_t row_size(const Tensor& t) {
  int64_t inner = 1;
  for (size_t d = 1; d < t.shape().size(); ++d) inner *= t.shape()[d];
  return inner;
}

}  // namespace

void CudaBackend::transpose2d(Tensor& out, const Tensor& a) {
  OnDevice on(out.device());
  const int64_t rows = a.size(0), cols = a.size(1);
  const dim3 block(kTile, kTileRows);
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, kTile)),
                  static_cast<unsigned>(std::min<int64_t>(ceil_div(rows, kTile), 65535)));
  dispatch_word(a.dtype(), [&](auto tag) {
    using W = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("transpose_kernel", transpose_kernel<W>, grid, block, on.stream(), static_cast<W*>(out.data_ptr()),
                    static_cast<const W*>(a.data_ptr()), rows, cols);
  });
}

void CudaBackend::index_select(Tensor& out, const Tensor& a, const Tensor& index) {
  OnDevice on(out.device());
  const int64_t rows = a.size(0), k = index.numel(), inner = row_size(a);
  on.ctx.launch_checked([&](IndexError* err) {
    if (inner == 0) {
      LOCKSTEP_LAUNCH("index_check_kernel", index_check_kernel, grid_for(k, on.ctx), kThreads, on.stream(),
                      index.data<int64_t>(), k, rows, IndexErrorKind::IndexSelect, err);
      return;
    }
    dispatch_word(a.dtype(), [&](auto tag) {
      using W = typename decltype(tag)::type;
      LOCKSTEP_LAUNCH("index_select_kernel", index_select_kernel<W>, grid_for(k * inner, on.ctx), kThreads, on.stream(),
                      static_cast<W*>(out.data_ptr()), static_cast<const W*>(a.data_ptr()), index.data<int64_t>(), k,
                      inner, rows, err);
    });
  });
}

void CudaBackend::index_add(Tensor& out, const Tensor& index, const Tensor& src) {
  OnDevice on(out.device());
  const int64_t rows = out.size(0), k = index.numel(), inner = row_size(src);
  on.ctx.launch_checked([&](IndexError* err) {
    dispatch(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      LOCKSTEP_LAUNCH("index_add_kernel", index_add_kernel<T>, grid_for(k * inner, on.ctx), kThreads, on.stream(),
                      out.data<T>(), index.data<int64_t>(), src.data<T>(), k, inner, rows, err);
    });
  });
}

}  // namespace lockstep::cuda::detail
