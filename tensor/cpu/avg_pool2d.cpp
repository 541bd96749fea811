// Average pooling of float32, bfloat16 and float16 planes on the CPU (tensor/cpu/avg_pool2d.h). Forward, per
// output row: the window's input rows are converted and added into one float32 row (vector converts and
// adds), then each window's columns of that row are added, one column offset at a time over every
// output column, divided by the window's count and rounded to 16 bits once. Backward runs the windows
// the other way: an output row's shares are spread along a float32 row, which is added into the
// window's rows of a float32 plane, rounded once at the end. Window counts are separable (rows x
// columns), so they come from two short tables. Every header is included before LOCKSTEP_ISA_BEGIN
// (isa.h says why).
#include "tensor/cpu/avg_pool2d.h"

#include <algorithm>
#include <vector>

#include "tensor/cpu/float_blocks.h"
#include "tensor/cpu/isa.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

// One axis of the window at output position o: input cells [lo, hi) and what it counts toward the
// divisor (the cells inside the input, or with count_include_pad also those in the padding).
struct Span {
  int64_t lo, hi;
  float count;
};

Span span(int64_t o, int64_t n, int64_t k, int64_t s, int64_t p, bool include_pad) {
  const int64_t start = o * s - p, end = std::min(start + k, n + p);
  const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(end, n);
  return {lo, hi, static_cast<float>(include_pad ? end - start : hi - lo)};
}

// The output columns [first, last) whose window's column j (0 <= j < kw), at ow * sw + j - pw, lies in
// the input: the loops over them have no bounds test, so they vectorize.
void columns_for(int64_t j, const AvgPool2dArgs& a, int64_t& first, int64_t& last) {
  const int64_t off = j - a.pw;
  first = off >= 0 ? 0 : (-off + a.sw - 1) / a.sw;
  last = off > a.W - 1 ? 0 : std::min(a.OW, (a.W - 1 - off) / a.sw + 1);
  last = std::max(last, first);
}

std::vector<float> column_counts(const AvgPool2dArgs& a) {
  std::vector<float> c(a.OW);
  for (int64_t ow = 0; ow < a.OW; ++ow) c[ow] = span(ow, a.W, a.kw, a.sw, a.pw, a.count_include_pad).count;
  return c;
}

int64_t plane_grain(const AvgPool2dArgs& a) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(a.H * a.W, 1)); }

}  // namespace

template <typename T>
void avg_pool2d_planes(const T* x, T* y, const AvgPool2dArgs& a) {
  constexpr Dtype dt = dtype_of<T>::value;
  const std::vector<float> wcount = column_counts(a);
  parallel_for(0, a.planes, plane_grain(a), [&](int64_t p0, int64_t p1) {
    std::vector<float> row_buf(a.W), tmp_buf(a.W), sum_buf(a.OW);
    float* __restrict r = row_buf.data();
    float* __restrict t = tmp_buf.data();
    float* __restrict s = sum_buf.data();
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * a.H * a.W;
      T* yp = y + p * a.OH * a.OW;
      for (int64_t oh = 0; oh < a.OH; ++oh) {
        const Span hs = span(oh, a.H, a.kh, a.sh, a.ph, a.count_include_pad);
        // r [W] = the window's input rows added, in float32.
        load_floats(dt, xp + hs.lo * a.W, 1, a.W, r);
        for (int64_t h = hs.lo + 1; h < hs.hi; ++h) {
          load_floats(dt, xp + h * a.W, 1, a.W, t);
          for (int64_t w = 0; w < a.W; ++w) r[w] += t[w];
        }
        // s [OW] = each window's columns of r added, divided by its count.
        std::fill(s, s + a.OW, 0.0f);
        for (int64_t j = 0; j < a.kw; ++j) {
          int64_t first, last;
          columns_for(j, a, first, last);
          for (int64_t ow = first; ow < last; ++ow) s[ow] += r[ow * a.sw + j - a.pw];
        }
        for (int64_t ow = 0; ow < a.OW; ++ow) s[ow] /= hs.count * wcount[ow];
        store_floats(dt, yp + oh * a.OW, 1, a.OW, s);
      }
    }
  });
}

template <typename T>
void avg_pool2d_backward_planes(const T* gy, T* gx, const AvgPool2dArgs& a) {
  constexpr Dtype dt = dtype_of<T>::value;
  const std::vector<float> wcount = column_counts(a);
  parallel_for(0, a.planes, plane_grain(a), [&](int64_t p0, int64_t p1) {
    std::vector<float> plane_buf(a.H * a.W), share_buf(a.OW), row_buf(a.W);
    float* __restrict acc = plane_buf.data();
    float* __restrict share = share_buf.data();
    float* __restrict r = row_buf.data();
    for (int64_t p = p0; p < p1; ++p) {
      std::fill(acc, acc + a.H * a.W, 0.0f);
      for (int64_t oh = 0; oh < a.OH; ++oh) {
        const Span hs = span(oh, a.H, a.kh, a.sh, a.ph, a.count_include_pad);
        // share [OW] = each window's gradient over its count; r [W] = the shares each column receives.
        load_floats(dt, gy + (p * a.OH + oh) * a.OW, 1, a.OW, share);
        for (int64_t ow = 0; ow < a.OW; ++ow) share[ow] /= hs.count * wcount[ow];
        std::fill(r, r + a.W, 0.0f);
        for (int64_t j = 0; j < a.kw; ++j) {
          int64_t first, last;
          columns_for(j, a, first, last);
          for (int64_t ow = first; ow < last; ++ow) r[ow * a.sw + j - a.pw] += share[ow];
        }
        for (int64_t h = hs.lo; h < hs.hi; ++h) {
          float* __restrict d = acc + h * a.W;
          for (int64_t w = 0; w < a.W; ++w) d[w] += r[w];
        }
      }
      store_floats(dt, gx + p * a.H * a.W, 1, a.H * a.W, acc);
    }
  });
}

template void avg_pool2d_planes<float>(const float*, float*, const AvgPool2dArgs&);
template void avg_pool2d_planes<BFloat16>(const BFloat16*, BFloat16*, const AvgPool2dArgs&);
template void avg_pool2d_planes<Float16>(const Float16*, Float16*, const AvgPool2dArgs&);
template void avg_pool2d_backward_planes<float>(const float*, float*, const AvgPool2dArgs&);
template void avg_pool2d_backward_planes<BFloat16>(const BFloat16*, BFloat16*, const AvgPool2dArgs&);
template void avg_pool2d_backward_planes<Float16>(const Float16*, Float16*, const AvgPool2dArgs&);

LOCKSTEP_ISA_END
