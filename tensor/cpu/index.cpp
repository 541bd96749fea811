// The CPU backend's index and sort kernels (tensor/backend.h): plain loops over contiguous
// [outer, n, inner] views, checking each index as they read it. Every dtype; the adds into a bfloat16
// or float16 destination read both elements into float32, add and round each sum (PyTorch's rule for
// index_add_ and scatter_add_ on 16-bit CPU tensors, and lockstep's CUDA kernels').
#include <algorithm>
#include <cstring>
#include <numeric>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/tensor.h"

namespace lockstep::cpu {
namespace {

using fn::is_nan;

void check_index(int64_t v, int64_t n, int64_t pos, const char* op) {
  LOCKSTEP_CHECK(v >= 0 && v < n, op, ": index ", v, " at position ", pos, " is out of range for a dimension of size ",
                 n);
}

}  // namespace

void CpuBackend::index_select(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n,
                  int64_t inner) {
  const int64_t k = index.numel();
  const size_t row = inner * element_size(a.dtype());
  const int64_t* idx = index.data<int64_t>();
  for (int64_t j = 0; j < k; ++j) check_index(idx[j], n, j, "index_select");
  const char* src = static_cast<const char*>(a.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j) std::memcpy(dst + (o * k + j) * row, src + (o * n + idx[j]) * row, row);
}

void CpuBackend::index_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
               int64_t inner) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const int64_t k = index.numel();
    const int64_t* idx = index.data<int64_t>();
    for (int64_t j = 0; j < k; ++j) check_index(idx[j], n, j, "index_add_");
    T* d = out.data<T>();
    const T* s = src.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j) {
        T* dr = d + (o * n + idx[j]) * inner;
        const T* sr = s + (o * k + j) * inner;
        for (int64_t i = 0; i < inner; ++i) dr[i] = static_cast<T>(static_cast<C>(dr[i]) + static_cast<C>(sr[i]));
      }
  });
}

namespace {
// gather (out[pos] = a[row]) and, with kAdd, scatter_add (out[row] += src[pos]): pos walks index
// [outer, k, inner], row is its element's position in [outer, n, inner].
template <bool kAdd>
void gather_or_scatter(Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t n, int64_t inner,
                       const char* op) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const int64_t k = index.numel() / (outer * inner);
    const int64_t* idx = index.data<int64_t>();
    const T* x = in.data<T>();
    T* y = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t pos = (o * k + j) * inner + i, v = idx[pos];
          check_index(v, n, pos, op);
          const int64_t row = (o * n + v) * inner + i;
          if constexpr (kAdd) y[row] = static_cast<T>(static_cast<C>(y[row]) + static_cast<C>(x[pos]));
          else y[pos] = x[row];
        }
  });
}
}  // namespace

void CpuBackend::gather(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n, int64_t inner) {
  gather_or_scatter<false>(out, a, index, outer, n, inner, "gather");
}

void CpuBackend::scatter_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                             int64_t inner) {
  gather_or_scatter<true>(out, src, index, outer, n, inner, "scatter_add_");
}

// out[row] = rule(out[row], src[pos]) in index order, by row `op` of tensor/scatter_ops.h.
void CpuBackend::scatter(Scatter op, Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                         int64_t inner) {
  const char* name = scatter_name(op);
  visit_scatter(op, [&](auto s, auto kinds) {
    dispatch(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!op_accepts<decltype(kinds)::value, T>()) {
        fail(name, ": not defined for ", dtype_name(out.dtype()), " tensors");
      } else {
        using C = compute_t<T>;
        using R = ScatterRule<decltype(s)::value, C>;
        const int64_t k = index.numel() / (outer * inner);
        const int64_t* idx = index.data<int64_t>();
        const T* x = src.data<T>();
        T* y = out.data<T>();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < k; ++j)
            for (int64_t i = 0; i < inner; ++i) {
              const int64_t pos = (o * k + j) * inner + i, v = idx[pos];
              check_index(v, n, pos, name);
              const int64_t row = (o * n + v) * inner + i;
              y[row] = static_cast<T>(R::apply(static_cast<C>(y[row]), static_cast<C>(x[pos])));
            }
      }
    });
  });
}

// Every dtype, bfloat16 and float16 as they are: compared in compute_t (float32, exact for them), the
// values moved as stored.
void CpuBackend::sort(Tensor& values, Tensor& indices, const Tensor& a, int64_t rows, int64_t n, bool descending) {
  dispatch(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* x = a.data<T>();
    T* v = values.data<T>();
    int64_t* ix = indices.data<int64_t>();
    // NaN sorts as the largest value, as PyTorch.
    auto less = [](C p, C q) { return !is_nan(p) && (is_nan(q) || p < q); };
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * n;
      int64_t* ir = ix + r * n;
      std::iota(ir, ir + n, int64_t{0});
      if (descending) std::stable_sort(ir, ir + n, [&](int64_t i, int64_t j) { return less(row[j], row[i]); });
      else std::stable_sort(ir, ir + n, [&](int64_t i, int64_t j) { return less(row[i], row[j]); });
      for (int64_t i = 0; i < n; ++i) v[r * n + i] = row[ir[i]];
    }
  });
}

}  // namespace lockstep::cpu
