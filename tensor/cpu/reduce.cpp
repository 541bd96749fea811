// The CPU's reductions (tensor/cpu/reduce.h): one loop per layout, instantiated per row of
// tensor/reduce_ops.h, so the CPU computes exactly the rule the CUDA kernels compute.
//
// inner == 1: each output is a contiguous row. Floating sums, means and products go through
// row_reduce, four vector registers of double partials (the float32 elements widened on load); the
// others fold the row in order with the rule's next().
// inner > 1: outputs are columns. Floating sums, means and products keep kRegs registers of double
// accumulators for kRegs * lanes adjacent columns while all n rows stream past (one widening load and one
// add per element, no accumulator traffic: as fast as the old float32 accumulation); other rules and
// the columns left over keep a block of accumulators on the stack, the rows read in order.
// Compiled once per ISA (tensor/cpu/isa.h); every header is included before LOCKSTEP_ISA_BEGIN.
#include "tensor/cpu/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "tensor/cpu/isa.h"
#include "tensor/cpu/row_reduce.h"
#include "tensor/cpu/rows.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

constexpr int64_t kBlock = 256;  // columns per task
// Accumulator registers per column chunk (of 16 vector registers with AVX2, 32 with AVX-512): enough
// loads in flight to cover the strided rows' latency.
#if defined(LOCKSTEP_ISA_AVX512)
constexpr int kRegs = 16;
#else
constexpr int kRegs = 8;
#endif

template <typename R>
constexpr bool kVectorRule = R::kCombine != Combine::kOther && std::is_floating_point_v<typename R::Acc>;

// R's combine on vector registers as well as scalars. Spelled here, inside the ISA namespace, not
// called through the rule: a header's template instantiated on AVX-512 vectors would be compiled for
// the baseline (tensor/cpu/isa.h).
template <typename R>
auto vector_combine() {
  if constexpr (R::kCombine == Combine::kAdd) return [](auto a, auto b) { return a + b; };
  else return [](auto a, auto b) { return a * b; };
}

// Rows of n contiguous elements (inner == 1): y[r] = R over x[r, :].
template <typename R, typename T>
void reduce_rows(const T* x, typename R::Out* y, int64_t rows, int64_t n) {
  using Acc = typename R::Acc;
  parallel_for(0, rows, std::max<int64_t>(1, kRowGrain / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* p = x + r * n;
      Acc acc = R::identity();
      if constexpr (kVectorRule<R>) {
        acc = row_reduce<Acc>(n, vector_combine<R>(), R::identity(), kIdentity, p);
      } else if (n > 0) {
        acc = R::lift(p[0], 0);
        for (int64_t k = 1; k < n; ++k) acc = R::next(acc, p[k], k);
      }
      y[r] = R::finish(acc, n);
    }
  });
}

// Columns [0, w) of base (rows of stride inner), each reduced over n rows into out, w <= kBlock.
template <typename R, typename T>
void reduce_block(const T* base, typename R::Out* out, int64_t n, int64_t inner, int64_t w) {
  using Acc = typename R::Acc;
  int64_t i = 0;
  if constexpr (kVectorRule<R>) {
    using V = typename Vec<Acc>::type;
    constexpr int kLanes = kVectorBytes / sizeof(Acc);
    const auto op = vector_combine<R>();
    for (; i + kRegs * kLanes <= w; i += kRegs * kLanes) {
      V acc[kRegs];
      for (int u = 0; u < kRegs; ++u) acc[u] = V{} + R::identity();
      for (int64_t k = 0; k < n; ++k) {
        const T* row = base + k * inner + i;
        for (int u = 0; u < kRegs; ++u) acc[u] = op(acc[u], load_as<Acc>(row + u * kLanes));
      }
      Acc lanes[kRegs * kLanes];
      std::memcpy(lanes, acc, sizeof lanes);
      for (int j = 0; j < kRegs * kLanes; ++j) out[i + j] = R::finish(lanes[j], n);
    }
  }
  if (i == w) return;
  Acc acc[kBlock];
  const int64_t m = w - i;
  if (n == 0) std::fill(acc, acc + m, R::identity());
  for (int64_t j = 0; j < m && n > 0; ++j) acc[j] = R::lift(base[i + j], 0);
  for (int64_t k = 1; k < n; ++k) {
    const T* __restrict row = base + k * inner + i;
    for (int64_t j = 0; j < m; ++j) acc[j] = R::next(acc[j], row[j], k);
  }
  for (int64_t j = 0; j < m; ++j) out[i + j] = R::finish(acc[j], n);
}

// Columns (inner > 1): y[o, i] = R over x[o, :, i], tasks of kBlock columns of one o.
template <typename R, typename T>
void reduce_cols(const T* x, typename R::Out* y, int64_t outer, int64_t n, int64_t inner) {
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kRowGrain / std::max<int64_t>(n * std::min(inner, kBlock), 1));
  parallel_for(0, outer * blocks, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / blocks, i0 = t % blocks * kBlock;
      reduce_block<R>(x + o * n * inner + i0, y + o * inner + i0, n, inner, std::min(kBlock, inner - i0));
    }
  });
}

}  // namespace

void reduce(Reduction op, Dtype dtype, const void* x, void* out, int64_t outer, int64_t n, int64_t inner) {
  visit_reduction(op, [&](auto r, auto kinds) {
    dispatch(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!op_accepts<decltype(kinds)::value, T>()) {
        fail(reduction_name(op), ": not defined for ", dtype_name(dtype), " tensors");
      } else {
        using R = ReduceRule<decltype(r)::value, T>;
        const T* px = static_cast<const T*>(x);
        auto* py = static_cast<typename R::Out*>(out);
        if (inner == 1) reduce_rows<R>(px, py, outer, n);
        else reduce_cols<R>(px, py, outer, n, inner);
      }
    });
  });
}

LOCKSTEP_ISA_END
