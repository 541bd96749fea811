// Softmax and LayerNorm over contiguous rows (tensor/cpu/rows.h), compiled once per ISA
// (tensor/cpu/isa.h): these loops are exp, multiply-adds and row sums, twice as wide with AVX-512.
// Every header is included before LOCKSTEP_ISA_BEGIN (isa.h says why).
#include "tensor/cpu/rows.h"

#include <algorithm>
#include <cmath>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"
#include "tensor/elementwise_ops.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {
int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kRowGrain / std::max<int64_t>(n, 1)); }
}  // namespace

template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict xr = x + r * n;
      T* __restrict yr = y + r * n;
      // Subtracting the max keeps exp() from overflowing (stable log-sum-exp).
      const T m = row_max<T>(n, xr);
      // math::exp, not Eigen's: Eigen's AVX2 exp clamps its argument at -88.38, so a masked score
      // (exp(-inf), causal attention) came out as 2.9e-39, a denormal, not 0, and every product with
      // that attention matrix ran 30-60x slower (x86 handles denormal operands in microcode): 78 of a
      // GPT step's 190 ms. math::exp gives 0 and vectorizes in float32.
      for (int64_t k = 0; k < n; ++k) yr[k] = math::exp(xr[k] - m);
      const T s = row_sum<T>(n, kIdentity, yr);
      if (log) {
        const T shift = m + std::log(s);
        for (int64_t k = 0; k < n; ++k) yr[k] = xr[k] - shift;
      } else {
        const T inv = T(1) / s;  // a multiply per element instead of a divide (within 1 ulp of it)
        for (int64_t k = 0; k < n; ++k) yr[k] *= inv;
      }
    }
  });
}

template <typename T>
void softmax_backward_rows(const T* g, const T* y, T* gx, int64_t rows, int64_t n, bool log) {
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict gr = g + r * n;
      const T* __restrict yr = y + r * n;
      T* __restrict out = gx + r * n;
      if (log) {  // y = log_softmax: dx = g - softmax * sum(g); math::exp for exp(-inf) = 0, as above
        const T s = row_sum<T>(n, kIdentity, gr);
        for (int64_t k = 0; k < n; ++k) out[k] = gr[k] - math::exp(yr[k]) * s;
      } else {  // dx = y * (g - sum(g * y))
        const T s = row_sum<T>(n, [](auto g, auto y) { return g * y; }, gr, yr);
        for (int64_t k = 0; k < n; ++k) out[k] = yr[k] * (gr[k] - s);
      }
    }
  });
}

template <typename T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows, int64_t n,
                     double eps) {
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict xr = x + r * n;
      T* __restrict yr = y + r * n;
      // Two passes in double: the mean, then the mean squared deviation (no cancellation).
      const double mu = row_sum<double>(n, kIdentity, xr) / double(n);
      const double var = row_sum<double>(n, [&](auto v) { return (v - mu) * (v - mu); }, xr) / double(n);
      const T m = static_cast<T>(mu), rs = static_cast<T>(1 / std::sqrt(var + eps));
      mean[r] = m;
      rstd[r] = rs;
      if (w && b) for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) * rs * w[j] + b[j];
      else if (w) for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) * rs * w[j];
      else if (b) for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) * rs + b[j];
      else for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) * rs;
    }
  });
}

template <typename T>
void layer_norm_backward_rows(const T* gy, const T* x, const T* mean, const T* rstd, const T* w, T* gx, T* gw,
                              T* gb, int64_t rows, int64_t n) {
  if (gx) {
    parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T *xr = x + r * n, *gr = gy + r * n;
        const T m = mean[r], rs = rstd[r];
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
        const T at = static_cast<T>(a / double(n)), ct = static_cast<T>(c / double(n));
        auto gh = [&](int64_t j) { return w ? gr[j] * w[j] : gr[j]; };
        for (int64_t j = 0; j < n; ++j) out[j] = rs * (gh(j) - at - (xr[j] - m) * rs * ct);
      }
    });
  }
  if (!gw && !gb) return;
  // Column sums over the rows; threads take disjoint column ranges.
  parallel_for(0, n, row_grain(rows), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      if (gw) gw[j] = T(0);
      if (gb) gb[j] = T(0);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x + r * n, *gr = gy + r * n;
      const T m = mean[r], rs = rstd[r];
      if (gw) for (int64_t j = j0; j < j1; ++j) gw[j] += gr[j] * ((xr[j] - m) * rs);
      if (gb) for (int64_t j = j0; j < j1; ++j) gb[j] += gr[j];
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                             \
  template void softmax_rows<T>(const T*, T*, int64_t, int64_t, bool);                                      \
  template void softmax_backward_rows<T>(const T*, const T*, T*, int64_t, int64_t, bool);                   \
  template void layer_norm_rows<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, double);      \
  template void layer_norm_backward_rows<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*,     \
                                            int64_t, int64_t);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

LOCKSTEP_ISA_END
