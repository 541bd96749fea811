// One dimension's resampling on the CPU (tensor/cpu/resample.h). Along a middle dimension (inner > 1)
// an output row is the weighted sum of whole input rows, a vector loop over inner; along the last
// (inner == 1) each output is a short dot product over its taps' elements of the row. The backward
// runs the same loops the other way, each outer slice adding into its own gradient rows, so the
// slices split across threads without atomics and the sums run in (o, t) order, as the composed
// index_add did. 16-bit rows are converted to float32 blocks (float_blocks.h) on the way in and
// rounded once on the way out. Every header is included before LOCKSTEP_ISA_BEGIN (isa.h says why).
#include "tensor/cpu/resample.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "tensor/cpu/float_blocks.h"
#include "tensor/cpu/isa.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

// The sums' type: float64 for float64, float32 for the rest.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// n elements at p as Acc<T>: p itself when T is Acc<T>, else converted into scratch.
template <typename T>
const Acc<T>* as_acc(const T* p, int64_t n, Acc<T>* scratch) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    return p;
  } else {
    load_floats(dtype_of<T>::value, p, 1, n, scratch);
    return scratch;
  }
}

// Where n results of Acc<T> go: straight into dst when T is Acc<T>, else into scratch, then stored.
template <typename T>
Acc<T>* acc_out(T* dst, Acc<T>* scratch) {
  if constexpr (std::is_same_v<T, Acc<T>>) return dst;
  else return scratch;
}
template <typename T>
void store(T* dst, const Acc<T>* acc, int64_t n) {
  if constexpr (!std::is_same_v<T, Acc<T>>) store_floats(dtype_of<T>::value, dst, 1, n, acc);
}

template <typename A>
std::vector<A> weights_of(const ResampleArgs& a) {
  std::vector<A> w(a.out * a.taps, A(1));
  if (a.weight)
    for (size_t k = 0; k < w.size(); ++k) w[k] = static_cast<A>(a.weight[k]);
  return w;
}

// About 32K multiply-adds per chunk of work handed to a thread.
int64_t grain(int64_t work_per_item) { return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, work_per_item)); }

}  // namespace

template <typename T>
void resample(const T* x, T* y, const ResampleArgs& a) {
  using A = Acc<T>;
  const std::vector<A> w = weights_of<A>(a);
  const int64_t in = a.in, out = a.out, inner = a.inner, taps = a.taps;
  if (inner == 1) {  // along the last dimension: a short dot product per output
    parallel_for(0, a.outer, grain(out * taps), [&](int64_t lo, int64_t hi) {
      std::vector<A> xs(in), ys(out);
      for (int64_t b = lo; b < hi; ++b) {
        const A* xr = as_acc(x + b * in, in, xs.data());
        A* yr = acc_out(y + b * out, ys.data());
        for (int64_t o = 0; o < out; ++o) {
          const int64_t* idx = a.index + o * taps;
          const A* wo = w.data() + o * taps;
          A s = wo[0] * xr[idx[0]];
          for (int64_t t = 1; t < taps; ++t) s += wo[t] * xr[idx[t]];
          yr[o] = s;
        }
        store(y + b * out, yr, out);
      }
    });
    return;
  }
  // along a middle dimension: whole rows of inner elements
  parallel_for(0, a.outer * out, grain(inner * taps), [&](int64_t lo, int64_t hi) {
    std::vector<A> xs(inner), ys(inner);
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t b = r / out, o = r % out;
      A* yr = acc_out(y + r * inner, ys.data());
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t k = o * taps + t;
        const A wk = w[k];
        const A* xr = as_acc(x + (b * in + a.index[k]) * inner, inner, xs.data());
        if (t == 0) {
          for (int64_t i = 0; i < inner; ++i) yr[i] = wk * xr[i];
        } else {
          for (int64_t i = 0; i < inner; ++i) yr[i] += wk * xr[i];
        }
      }
      store(y + r * inner, yr, inner);
    }
  });
}

template <typename T>
void resample_backward(const T* gy, T* gx, const ResampleArgs& a) {
  using A = Acc<T>;
  const std::vector<A> w = weights_of<A>(a);
  const int64_t in = a.in, out = a.out, inner = a.inner, taps = a.taps;
  parallel_for(0, a.outer, grain(out * taps * inner), [&](int64_t lo, int64_t hi) {
    std::vector<A> gs(out * inner), acc(in * inner);
    for (int64_t b = lo; b < hi; ++b) {
      const A* g = as_acc(gy + b * out * inner, out * inner, gs.data());
      A* dst = acc_out(gx + b * in * inner, acc.data());
      std::fill(dst, dst + in * inner, A(0));
      for (int64_t o = 0; o < out; ++o) {
        const A* go = g + o * inner;
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t k = o * taps + t;
          const A wk = w[k];
          A* d = dst + a.index[k] * inner;
          for (int64_t i = 0; i < inner; ++i) d[i] += wk * go[i];
        }
      }
      store(gx + b * in * inner, dst, in * inner);
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                            \
  template void resample<T>(const T*, T*, const ResampleArgs&);            \
  template void resample_backward<T>(const T*, T*, const ResampleArgs&);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
LOCKSTEP_INSTANTIATE(BFloat16)
LOCKSTEP_INSTANTIATE(Float16)
#undef LOCKSTEP_INSTANTIATE

LOCKSTEP_ISA_END
