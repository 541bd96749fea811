// GroupNorm's CPU kernels (tensor/cpu/group_norm.h), compiled once per ISA (tensor/cpu/isa.h). One
// thread takes a whole (n, g) group, whose values are contiguous and, at the sizes GroupNorm sees, small
// enough to stay in L1/L2 between the passes over it: the forward reads x from memory once (mean, then
// the squared deviations, then y), the backward reads gy and x once (the per-channel sums, then gx).
// Every header is included before LOCKSTEP_ISA_BEGIN (isa.h says why).
#include "tensor/cpu/group_norm.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"
#include "tensor/cpu/rows.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

// Groups per thread below which a loop stays on the calling thread.
int64_t grain_for(int64_t values_per_group) {
  return std::max<int64_t>(1, kRowGrain / std::max<int64_t>(values_per_group, 1));
}

// (sum of g[k], sum of g[k] * (x[k] - mu)) over k < n in double from one read of g and x: the backward's
// per-channel sums, with two accumulators each so that neither is one chain of dependent adds.
template <typename T>
std::pair<double, double> grad_sums(int64_t n, const T* g, const T* x, double mu) {
  using V = typename Vec<double>::type;
  constexpr int kLanes = kVectorBytes / sizeof(double);
  V b0{}, b1{}, s0{}, s1{};
  int64_t k = 0;
  for (; k + 2 * kLanes <= n; k += 2 * kLanes) {
    const V g0 = load_as<double>(g + k), g1 = load_as<double>(g + k + kLanes);
    b0 += g0;
    b1 += g1;
    s0 += g0 * (load_as<double>(x + k) - mu);
    s1 += g1 * (load_as<double>(x + k + kLanes) - mu);
  }
  if (k + kLanes <= n) {
    const V g0 = load_as<double>(g + k);
    b0 += g0;
    s0 += g0 * (load_as<double>(x + k) - mu);
    k += kLanes;
  }
  auto add = [](auto u, auto v) { return u + v; };
  double db = fold(b0 + b1, add), ds = fold(s0 + s1, add);
  for (; k < n; ++k) {
    db += static_cast<double>(g[k]);
    ds += static_cast<double>(g[k]) * (static_cast<double>(x[k]) - mu);
  }
  return {db, ds};
}

}  // namespace

template <typename T>
void group_norm(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean, compute_t<T>* rstd, int64_t N,
                int64_t C, int64_t HW, int64_t G, double eps) {
  using F = compute_t<T>;
  const int64_t D = C / G, m = D * HW;
  parallel_for(0, N * G, grain_for(m), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* __restrict xr = x + r * m;
      T* __restrict yr = y + r * m;
      // Two passes (the mean, then the mean squared deviation: no cancellation); the second reads
      // the group from cache.
      const double mu = row_sum<double>(m, kIdentity, xr) / double(m);
      const double var = row_sum<double>(m, [&](auto v) { return (v - mu) * (v - mu); }, xr) / double(m);
      // y from the saved (compute_t) mean and rstd, which the backward reads.
      const F mf = static_cast<F>(mu), rs = static_cast<F>(1 / std::sqrt(var + eps));
      mean[r] = mf;
      rstd[r] = rs;
      const int64_t c0 = (r % G) * D;
      for (int64_t d = 0; d < D; ++d) {
        const F a = w ? rs * static_cast<F>(w[c0 + d]) : rs, sh = b ? static_cast<F>(b[c0 + d]) : F(0);
        const T* __restrict xc = xr + d * HW;
        T* __restrict yc = yr + d * HW;
        for (int64_t j = 0; j < HW; ++j) yc[j] = static_cast<T>((static_cast<F>(xc[j]) - mf) * a + sh);
      }
    }
  });
}

// With per-channel sums db = sum gy, ds = sum gy * (x - mean) and their weighted group totals
// dbg = sum_c w db, dsg = sum_c w ds over the group's m values:
// gx = rstd w gy - rstd^3 dsg / m (x - mean) - rstd dbg / m, gw = sum_n rstd ds, gb = sum_n db.
template <typename T>
void group_norm_backward(const T* gy, const T* x, const compute_t<T>* mean, const compute_t<T>* rstd, const T* w,
                         T* gx, T* gw, T* gb, int64_t N, int64_t C, int64_t HW, int64_t G) {
  using F = compute_t<T>;
  const int64_t D = C / G, m = D * HW;
  const bool params = gw || gb;
  std::vector<double> db(params ? N * C : 0), ds(params ? N * C : 0);  // per (n, c), for gw and gb
  parallel_for(0, N * G, grain_for(m), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double mu = mean[r], rs = rstd[r];
      const int64_t c0 = (r % G) * D;
      double dbg = 0, dsg = 0;
      for (int64_t d = 0; d < D; ++d) {
        const int64_t nc = r * D + d;  // = n * C + c0 + d
        const auto [b_, s_] = grad_sums(HW, gy + nc * HW, x + nc * HW, mu);
        if (params) db[nc] = b_, ds[nc] = s_;
        const double wd = w ? static_cast<double>(w[c0 + d]) : 1.0;
        dbg += wd * b_;
        dsg += wd * s_;
      }
      if (!gx) continue;
      const F kx = static_cast<F>(-rs * rs * rs * dsg / double(m)), k0 = static_cast<F>(-rs * dbg / double(m));
      const F mf = mean[r], rf = rstd[r];
      for (int64_t d = 0; d < D; ++d) {
        const int64_t at = (r * D + d) * HW;
        const F a = w ? rf * static_cast<F>(w[c0 + d]) : rf;
        const T *__restrict gc = gy + at, *__restrict xc = x + at;
        T* __restrict out = gx + at;
        for (int64_t j = 0; j < HW; ++j)
          out[j] = static_cast<T>(a * static_cast<F>(gc[j]) + kx * (static_cast<F>(xc[j]) - mf) + k0);
      }
    }
  });
  if (!params) return;
  parallel_for(0, C, grain_for(N), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sw = 0, sb = 0;
      for (int64_t n = 0; n < N; ++n) {
        sw += ds[n * C + c] * static_cast<double>(rstd[n * G + c / D]);
        sb += db[n * C + c];
      }
      if (gw) gw[c] = static_cast<T>(sw);
      if (gb) gb[c] = static_cast<T>(sb);
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                                \
  template void group_norm<T>(const T*, const T*, const T*, T*, compute_t<T>*, compute_t<T>*, int64_t, int64_t, \
                              int64_t, int64_t, double);                                                       \
  template void group_norm_backward<T>(const T*, const T*, const compute_t<T>*, const compute_t<T>*, const T*,  \
                                       T*, T*, T*, int64_t, int64_t, int64_t, int64_t);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
LOCKSTEP_INSTANTIATE(BFloat16)
LOCKSTEP_INSTANTIATE(Float16)
#undef LOCKSTEP_INSTANTIATE

LOCKSTEP_ISA_END
