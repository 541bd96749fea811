// Batch norm's CPU kernels (tensor/cpu/batch_norm.h), compiled once per ISA (tensor/cpu/isa.h). The
// reductions read each plane once and keep two sums in double vector registers (float32, bfloat16 and
// float16 values are widened as they load); the elementwise passes are one multiply-add (forward) or two
// (backward) per value with per-channel constants, in float32 for 16-bit planes (each output rounded
// once). Every header is included before LOCKSTEP_ISA_BEGIN (isa.h says why).
#include "tensor/cpu/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"
#include "tensor/cpu/rows.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

// Work items per thread below which a loop stays on the calling thread: a channel is N * inner values,
// a plane `inner`.
int64_t grain_for(int64_t values_per_item) { return std::max<int64_t>(1, kRowGrain / std::max<int64_t>(values_per_item, 1)); }

// (sum of f(p[k]...), sum of g(p[k]...)) over k < n in double, from one read of the operands: two
// accumulators each (so neither sum is one chain of dependent adds), as row_reduce.h's row_sum.
template <typename F, typename G, typename... T>
std::pair<double, double> row_sums2(int64_t n, F f, G g, const T*... p) {
  using V = typename Vec<double>::type;
  constexpr int kLanes = kVectorBytes / sizeof(double);
  V a0{}, a1{}, b0{}, b1{};
  int64_t k = 0;
  for (; k + 2 * kLanes <= n; k += 2 * kLanes) {
    a0 += f(load_as<double>(p + k)...);
    b0 += g(load_as<double>(p + k)...);
    a1 += f(load_as<double>(p + k + kLanes)...);
    b1 += g(load_as<double>(p + k + kLanes)...);
  }
  for (; k + kLanes <= n; k += kLanes) {
    a0 += f(load_as<double>(p + k)...);
    b0 += g(load_as<double>(p + k)...);
  }
  auto add = [](auto u, auto v) { return u + v; };
  double a = fold(a0 + a1, add), b = fold(b0 + b1, add);
  for (; k < n; ++k) {
    a += f(static_cast<double>(p[k])...);
    b += g(static_cast<double>(p[k])...);
  }
  return {a, b};
}

}  // namespace

template <typename T>
void batch_norm_stats(const T* x, double* sums, int64_t N, int64_t C, int64_t inner) {
  parallel_for(0, C, grain_for(N * inner), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0, q = 0;
      for (int64_t n = 0; n < N; ++n) {
        auto [ps, pq] = row_sums2(inner, kIdentity, [](auto v) { return v * v; }, x + (n * C + c) * inner);
        s += ps;
        q += pq;
      }
      sums[c] = s;
      sums[C + c] = q;
    }
  });
}

template <typename T>
void batch_norm_elemt(const T* x, const double* mean, const double* invstd, const compute_t<T>* w,
                      const compute_t<T>* b, T* y, int64_t N, int64_t C, int64_t inner) {
  using F = compute_t<T>;
  parallel_for(0, N * C, grain_for(inner), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % C;
      const double a = invstd[c] * (w ? double(w[c]) : 1.0);
      const F at = static_cast<F>(a), bt = static_cast<F>((b ? double(b[c]) : 0.0) - mean[c] * a);
      const T* __restrict xp = x + p * inner;
      T* __restrict yp = y + p * inner;
      for (int64_t j = 0; j < inner; ++j) yp[j] = static_cast<T>(static_cast<F>(xp[j]) * at + bt);
    }
  });
}

template <typename T>
void batch_norm_backward_reduce(const T* gy, const T* x, const double* mean, double* sums, int64_t N, int64_t C,
                                int64_t inner) {
  parallel_for(0, C, grain_for(N * inner), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double m = mean[c];
      double s = 0, sx = 0;
      for (int64_t n = 0; n < N; ++n) {
        const int64_t at = (n * C + c) * inner;
        auto [ps, psx] = row_sums2(inner, [](auto g, auto) { return g; }, [m](auto g, auto v) { return g * (v - m); },
                                   gy + at, x + at);
        s += ps;
        sx += psx;
      }
      sums[c] = s;
      sums[C + c] = sx;
    }
  });
}

template <typename T>
void batch_norm_backward_elemt(const T* gy, const T* x, const double* mean, const double* invstd,
                               const compute_t<T>* w, const double* sums, double count, T* gx, int64_t N, int64_t C,
                               int64_t inner) {
  using F = compute_t<T>;
  parallel_for(0, N * C, grain_for(inner), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % C;
      // gx = k * (gy - mean_dy - (x - mean) * invstd^2 * mean_dy_xmu) = k * gy + c1 * x + c0.
      const double k = invstd[c] * (w ? double(w[c]) : 1.0);
      const double mdy = sums ? sums[c] / count : 0.0;
      const double proj = sums ? invstd[c] * invstd[c] * sums[C + c] / count : 0.0;
      const F kt = static_cast<F>(k), c1 = static_cast<F>(-k * proj), c0 = static_cast<F>(k * (proj * mean[c] - mdy));
      const T* __restrict gp = gy + p * inner;
      const T* __restrict xp = x + p * inner;
      T* __restrict out = gx + p * inner;
      for (int64_t j = 0; j < inner; ++j)
        out[j] = static_cast<T>(static_cast<F>(gp[j]) * kt + static_cast<F>(xp[j]) * c1 + c0);
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                               \
  template void batch_norm_stats<T>(const T*, double*, int64_t, int64_t, int64_t);                            \
  template void batch_norm_elemt<T>(const T*, const double*, const double*, const compute_t<T>*,               \
                                    const compute_t<T>*, T*, int64_t, int64_t, int64_t);                      \
  template void batch_norm_backward_reduce<T>(const T*, const T*, const double*, double*, int64_t, int64_t,    \
                                              int64_t);                                                       \
  template void batch_norm_backward_elemt<T>(const T*, const T*, const double*, const double*,                 \
                                             const compute_t<T>*, const double*, double, T*, int64_t, int64_t, \
                                             int64_t);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
LOCKSTEP_INSTANTIATE(BFloat16)
LOCKSTEP_INSTANTIATE(Float16)
#undef LOCKSTEP_INSTANTIATE

LOCKSTEP_ISA_END
