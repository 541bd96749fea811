// The CPU backend's index and sort kernels (tensor/backend.h): plain loops over contiguous
// [outer, n, inner] views, checking each index as they read it. Every dtype; the adds into a bfloat16
// or float16 destination read both elements into float32, add and round each sum (PyTorch's rule for
// index_add_ and scatter_add_ on 16-bit CPU tensors, and lockstep's CUDA kernels').
#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/tensor.h"

namespace lockstep::cpu {
namespace {

using fn::is_nan;

void check_index(int64_t v, int64_t n, int64_t pos, const char* op) {
  LOCKSTEP_CHECK(v >= 0 && v < n, op, ": index ", v, " at position ", pos, " is out of range for a dimension of size ",
                 n);
}

// Rows of integers sorted stably by a least-significant-digit radix sort on 8-bit digits of the value as
// an order-preserving unsigned key (the sign bit flipped; complemented for a descending order), a digit
// skipped where every key has the same one: a million int64 below 10^5 take 3 passes. The buffers serve
// every row; rows below kRadixMin elements take the comparison sort, which beats 256-bucket passes there.
constexpr int64_t kRadixMin = 1024;

template <typename T>
class RadixSorter {
 public:
  explicit RadixSorter(int64_t n) : keys_(n), keys2_(n), pos_(n), pos2_(n) {}
  void sort(const T* x, T* values, int64_t* indices, bool descending) {
    using U = std::make_unsigned_t<T>;
    constexpr int kBits = 8 * sizeof(T);
    const int64_t n = static_cast<int64_t>(keys_.size());
    for (int64_t i = 0; i < n; ++i) {
      U k = static_cast<U>(x[i]);
      if constexpr (std::is_signed_v<T>) k ^= U(1) << (kBits - 1);
      keys_[i] = descending ? static_cast<U>(~k) : k, pos_[i] = i;
    }
    for (int shift = 0; shift < kBits; shift += 8) {
      int64_t count[257] = {};
      for (int64_t i = 0; i < n; ++i) ++count[((keys_[i] >> shift) & 0xff) + 1];
      if (std::any_of(count + 1, count + 257, [&](int64_t c) { return c == n; })) continue;  // one digit for all
      for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = count[(keys_[i] >> shift) & 0xff]++;
        keys2_[at] = keys_[i], pos2_[at] = pos_[i];
      }
      keys_.swap(keys2_), pos_.swap(pos2_);
    }
    for (int64_t i = 0; i < n; ++i) indices[i] = pos_[i], values[i] = x[pos_[i]];
  }

 private:
  std::vector<std::make_unsigned_t<T>> keys_, keys2_;
  std::vector<int64_t> pos_, pos2_;
};

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
// The elements of [outer, k, inner] (the small side: gather's out, the scatters' src) by their rows:
// f(position of row (o, j)'s first element, its big-side row index v, the row's first element in the big
// side [outer, n, inner], whether index is per element (then element i reads index[pos + i])). index is
// [outer, k, inner] or, for the scatters, [outer, k]: one index per row.
template <typename F>
void for_each_row(const Tensor& index, int64_t outer, int64_t k, int64_t n, int64_t inner, const char* op, F&& f) {
  const int64_t* idx = index.data<int64_t>();
  const bool per_row = inner > 1 && index.numel() == outer * k;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t pos = (o * k + j) * inner;
      if (per_row) {
        const int64_t v = idx[o * k + j];
        check_index(v, n, o * k + j, op);
        f(pos, (o * n + v) * inner, /*per_element=*/false);
      } else {
        for (int64_t i = 0; i < inner; ++i) check_index(idx[pos + i], n, pos + i, op);
        f(pos, o * n * inner, /*per_element=*/true);
      }
    }
}

// gather (out[pos] = a[row]) and, with kAdd, scatter_add (out[row] += src[pos]): pos walks the small side
// [outer, k, inner], row is its element's position in [outer, n, inner].
template <bool kAdd>
void gather_or_scatter(Tensor& out, const Tensor& in, const Tensor& index, int64_t outer, int64_t n, int64_t inner,
                       const char* op) {
  dispatch(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const int64_t k = (kAdd ? in.numel() : out.numel()) / (outer * inner);
    const int64_t* idx = index.data<int64_t>();
    const T* x = in.data<T>();
    T* y = out.data<T>();
    for_each_row(index, outer, k, n, inner, op, [&](int64_t pos, int64_t base, bool per_element) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t row = per_element ? base + idx[pos + i] * inner + i : base + i;
        if constexpr (kAdd) y[row] = static_cast<T>(static_cast<C>(y[row]) + static_cast<C>(x[pos + i]));
        else y[pos + i] = x[row];
      }
    });
  });
}
}  // namespace

void CpuBackend::gather(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n, int64_t inner) {
  if (outer * inner > 0) gather_or_scatter<false>(out, a, index, outer, n, inner, "gather");
}

void CpuBackend::scatter_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                             int64_t inner) {
  if (outer * inner > 0) gather_or_scatter<true>(out, src, index, outer, n, inner, "scatter_add_");
}

// out[row] = rule(out[row], src[pos]) in index order, by row `op` of tensor/scatter_ops.h.
void CpuBackend::scatter(Scatter op, Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                         int64_t inner) {
  if (outer * inner == 0) return;
  const char* name = scatter_name(op);
  visit_scatter(op, [&](auto s, auto kinds) {
    dispatch(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!op_accepts<decltype(kinds)::value, T>()) {
        fail(name, ": not defined for ", dtype_name(out.dtype()), " tensors");
      } else {
        using C = compute_t<T>;
        using R = ScatterRule<decltype(s)::value, C>;
        const int64_t k = src.numel() / (outer * inner);
        const int64_t* idx = index.data<int64_t>();
        const T* x = src.data<T>();
        T* y = out.data<T>();
        for_each_row(index, outer, k, n, inner, name, [&](int64_t pos, int64_t base, bool per_element) {
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t row = per_element ? base + idx[pos + i] * inner + i : base + i;
            y[row] = static_cast<T>(R::apply(static_cast<C>(y[row]), static_cast<C>(x[pos + i])));
          }
        });
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
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (n >= kRadixMin) {
        RadixSorter<T> sorter(n);
        for (int64_t r = 0; r < rows; ++r) sorter.sort(x + r * n, v + r * n, ix + r * n, descending);
        return;
      }
    }
    // NaN sorts as the largest value, as PyTorch.
    auto less = [](C p, C q) { return !is_nan(p) && (is_nan(q) || p < q); };
    // (value, position) pairs sorted in place, ties by position (a stable order): the comparisons read
    // neighbouring memory, where sorting positions by the values they point at (stable_sort) jumped
    // through the row and took 2.5x PyTorch's time on a million elements.
    std::vector<std::pair<C, int64_t>> pairs(n);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * n;
      for (int64_t i = 0; i < n; ++i) pairs[i] = {static_cast<C>(row[i]), i};
      auto by_value = [&](const std::pair<C, int64_t>& p, const std::pair<C, int64_t>& q) {
        const bool before = descending ? less(q.first, p.first) : less(p.first, q.first);
        const bool after = descending ? less(p.first, q.first) : less(q.first, p.first);
        return before || (!after && p.second < q.second);
      };
      std::sort(pairs.begin(), pairs.end(), by_value);
      for (int64_t i = 0; i < n; ++i) {
        ix[r * n + i] = pairs[i].second;
        v[r * n + i] = row[pairs[i].second];
      }
    }
  });
}

}  // namespace lockstep::cpu
