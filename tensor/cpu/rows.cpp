// Softmax and LayerNorm over contiguous rows (tensor/cpu/rows.h), in float32 and float64, and on
// bfloat16 and float16 rows computed in float32 (compute_t), compiled once per ISA
// (tensor/cpu/isa.h): these loops are exp, multiply-adds and row sums, twice as wide with AVX-512.
// Every header is included before LOCKSTEP_ISA_BEGIN (isa.h says why).
#include "tensor/cpu/rows.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"
#include "tensor/dtype.h"
#include "tensor/elementwise_ops.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {
int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kRowGrain / std::max<int64_t>(n, 1)); }
}  // namespace

// bfloat16 and float16 rows (T) are read at 16 bits and computed in C = float32: statistics, sums and
// the exponentials of a softmax row stay in float32 (a row buffer) and each output is rounded once.
template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  using C = compute_t<T>;
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    std::vector<C> buf(std::is_same_v<C, T> ? 0 : n);  // the row's exponentials, for 16-bit rows
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict xr = x + r * n;
      T* __restrict yr = y + r * n;
      C* e;
      if constexpr (std::is_same_v<C, T>) e = yr;
      else e = buf.data();
      // Subtracting the max keeps exp() from overflowing (stable log-sum-exp).
      const C m = row_max<C>(n, xr);
      // math::exp, not Eigen's: Eigen's AVX2 exp clamps its argument at -88.38, so a masked score
      // (exp(-inf), causal attention) came out as 2.9e-39, a denormal, not 0, and every product with
      // that attention matrix ran 30-60x slower (x86 handles denormal operands in microcode): 78 of a
      // GPT step's 190 ms. math::exp gives 0 and vectorizes in float32.
      for (int64_t k = 0; k < n; ++k) e[k] = math::exp(static_cast<C>(xr[k]) - m);
      const C s = row_sum<C>(n, kIdentity, static_cast<const C*>(e));
      if (log) {
        const C shift = m + std::log(s);
        for (int64_t k = 0; k < n; ++k) yr[k] = static_cast<T>(static_cast<C>(xr[k]) - shift);
      } else {
        const C inv = C(1) / s;  // a multiply per element instead of a divide (within 1 ulp of it)
        for (int64_t k = 0; k < n; ++k) yr[k] = static_cast<T>(e[k] * inv);
      }
    }
  });
}

template <typename T>
void softmax_backward_rows(const T* g, const T* y, T* gx, int64_t rows, int64_t n, bool log) {
  using C = compute_t<T>;
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict gr = g + r * n;
      const T* __restrict yr = y + r * n;
      T* __restrict out = gx + r * n;
      if (log) {  // y = log_softmax: dx = g - softmax * sum(g); math::exp for exp(-inf) = 0, as above
        const C s = row_sum<C>(n, kIdentity, gr);
        for (int64_t k = 0; k < n; ++k)
          out[k] = static_cast<T>(static_cast<C>(gr[k]) - math::exp(static_cast<C>(yr[k])) * s);
      } else {  // dx = y * (g - sum(g * y))
        const C s = row_sum<C>(n, [](auto g, auto y) { return g * y; }, gr, yr);
        for (int64_t k = 0; k < n; ++k) out[k] = static_cast<T>(static_cast<C>(yr[k]) * (static_cast<C>(gr[k]) - s));
      }
    }
  });
}

template <typename T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean, compute_t<T>* rstd, int64_t rows,
                     int64_t n, double eps) {
  using C = compute_t<T>;
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict xr = x + r * n;
      T* __restrict yr = y + r * n;
      // Two passes in double: the mean, then the mean squared deviation (no cancellation).
      const double mu = row_sum<double>(n, kIdentity, xr) / double(n);
      const double var = row_sum<double>(n, [&](auto v) { return (v - mu) * (v - mu); }, xr) / double(n);
      const C m = static_cast<C>(mu), rs = static_cast<C>(1 / std::sqrt(var + eps));
      mean[r] = m;
      rstd[r] = rs;
      auto v = [&](int64_t j) { return (static_cast<C>(xr[j]) - m) * rs; };
      if (w && b) for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(v(j) * static_cast<C>(w[j]) + static_cast<C>(b[j]));
      else if (w) for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(v(j) * static_cast<C>(w[j]));
      else if (b) for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(v(j) + static_cast<C>(b[j]));
      else for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(v(j));
    }
  });
}

template <typename T>
void layer_norm_backward_rows(const T* gy, const T* x, const compute_t<T>* mean, const compute_t<T>* rstd,
                              const T* w, T* gx, T* gw, T* gb, int64_t rows, int64_t n) {
  using C = compute_t<T>;
  if (gx) {
    parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T *xr = x + r * n, *gr = gy + r * n;
        const C m = mean[r], rs = rstd[r];
        T* out = gx + r * n;
        // In double: a = mean(g * w), c = mean(g * w * xhat), with xhat = (x - mean) * rstd.
        const double md = m, rsd = rs;
        const auto xhat = [&](auto v) { return (v - md) * rsd; };
        double a, c;
        if (w) {
          a = row_sum<double>(n, [](auto g, auto wj) { return g * wj; }, gr, w);
          c = row_sum<double>(n, [&](auto g, auto wj, auto v) { return g * wj * xhat(v); }, gr, w, xr);
        } else {
          a = row_sum<double>(n, kIdentity, gr);
          c = row_sum<double>(n, [&](auto g, auto v) { return g * xhat(v); }, gr, xr);
        }
        const C at = static_cast<C>(a / double(n)), ct = static_cast<C>(c / double(n));
        auto gh = [&](int64_t j) { return w ? static_cast<C>(gr[j]) * static_cast<C>(w[j]) : static_cast<C>(gr[j]); };
        for (int64_t j = 0; j < n; ++j)
          out[j] = static_cast<T>(rs * (gh(j) - at - (static_cast<C>(xr[j]) - m) * rs * ct));
      }
    });
  }
  if (!gw && !gb) return;
  // Column sums over the rows, in C (a float32 buffer for 16-bit columns, rounded once at the end);
  // threads take disjoint column ranges.
  parallel_for(0, n, row_grain(rows), [&](int64_t j0, int64_t j1) {
    std::vector<C> sw(gw ? j1 - j0 : 0), sb(gb ? j1 - j0 : 0);
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * n + j0, *gr = gy + r * n + j0;
      const C m = mean[r], rs = rstd[r];
      if (gw) for (int64_t j = 0; j < j1 - j0; ++j) sw[j] += static_cast<C>(gr[j]) * ((static_cast<C>(xr[j]) - m) * rs);
      if (gb) for (int64_t j = 0; j < j1 - j0; ++j) sb[j] += static_cast<C>(gr[j]);
    }
    for (int64_t j = 0; j < j1 - j0; ++j) {
      if (gw) gw[j0 + j] = static_cast<T>(sw[j]);
      if (gb) gb[j0 + j] = static_cast<T>(sb[j]);
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                             \
  template void softmax_rows<T>(const T*, T*, int64_t, int64_t, bool);                                      \
  template void softmax_backward_rows<T>(const T*, const T*, T*, int64_t, int64_t, bool);                   \
  template void layer_norm_rows<T>(const T*, const T*, const T*, T*, compute_t<T>*, compute_t<T>*, int64_t,  \
                                   int64_t, double);                                                        \
  template void layer_norm_backward_rows<T>(const T*, const T*, const compute_t<T>*, const compute_t<T>*,    \
                                            const T*, T*, T*, T*, int64_t, int64_t);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
LOCKSTEP_INSTANTIATE(BFloat16)
LOCKSTEP_INSTANTIATE(Float16)
#undef LOCKSTEP_INSTANTIATE

LOCKSTEP_ISA_END
