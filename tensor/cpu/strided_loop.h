// The CPU backend's one walk over a StridedPlan (strided_walk, a callback per run of the last dimension)
// and, on it, the elementwise loop out[i] = f(in0[i], in1[i], ...) for every op in the elementwise table
// (strided_range). The 16-bit rows walk the same plan with their own per-run callback
// (elementwise_half.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "tensor/backend.h"
#include "tensor/cpu/isa.h"
#include "tensor/parallel.h"

// In the including file's ISA build (tensor/cpu/isa.h): each ISA gets its own instantiations.
LOCKSTEP_ISA_BEGIN

// The one strided walk over elements [begin, end) of plan p, for its first N operands: the outer
// dimensions advance by carrying counters, so a range can start anywhere (what splitting the work across
// threads needs). Where whole rows of the last two dimensions lie ahead (count > 1, starting at a row's
// start) it offers them to rows(off, count), which returns whether it ran them; every other stretch
// along the last dimension goes to run(off, len). off[k] is operand k's offset in elements.
template <int N, typename Run, typename Rows>
inline void strided_walk(const StridedPlan& p, int64_t begin, int64_t end, Run&& run, Rows&& rows) {
  const int nd = p.nd;
  int64_t idx[StridedPlan::kMaxDims];
  std::array<int64_t, N> off{};
  int64_t rest = begin;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rest % p.shape[d];
    rest /= p.shape[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * p.stride[k][d];
  }
  const int64_t n = p.shape[nd - 1];
  // After idx[d] advanced: wrap it and the dimensions above it.
  auto carry = [&](int d) {
    for (; d > 0 && idx[d] == p.shape[d]; --d) {
      for (int k = 0; k < N; ++k) off[k] += p.stride[k][d - 1] - idx[d] * p.stride[k][d];
      idx[d] = 0;
      ++idx[d - 1];
    }
  };
  for (int64_t pos = begin; pos < end;) {
    if (nd >= 2 && idx[nd - 1] == 0) {
      const int64_t count = std::min(p.shape[nd - 2] - idx[nd - 2], (end - pos) / n);
      if (count > 1 && rows(std::as_const(off), count)) {
        for (int k = 0; k < N; ++k) off[k] += count * p.stride[k][nd - 2];
        idx[nd - 2] += count;
        pos += count * n;
        carry(nd - 2);
        continue;
      }
    }
    const int64_t len = std::min(n - idx[nd - 1], end - pos);
    run(std::as_const(off), len);
    pos += len;
    idx[nd - 1] += len;
    for (int k = 0; k < N; ++k) off[k] += len * p.stride[k][nd - 1];
    carry(nd - 1);
  }
}

// The elementwise rows' loop: out[i] = f(in0[i], in1[i], ...) over [begin, end) of the plan. The
// innermost dimension runs as a flat loop (vectorized when every operand is contiguous there).
template <typename F, typename Out, typename... In, size_t... I>
void strided_range(const StridedPlan& p, const F& f, Out* out, std::tuple<const In*...> in, int64_t begin,
                   int64_t end, std::index_sequence<I...>) {
  constexpr int N = 1 + sizeof...(In);
  const int nd = p.nd;
  const int64_t n = p.shape[nd - 1];
  std::array<int64_t, N> s;
  for (int k = 0; k < N; ++k) s[k] = p.stride[k][nd - 1];
  bool contiguous = true;
  for (int k = 0; k < N; ++k) contiguous = contiguous && s[k] == 1;
  // Inputs broadcast along the last dimension (stride 0, e.g. a scalar or a bias) with everything
  // else contiguous: their value is repeated into a small buffer so the contiguous, vectorized loop
  // runs over blocks of kBlock elements.
  constexpr int64_t kBlock = 256;
  bool broadcast_inner = s[0] == 1;
  for (int k = 1; k < N; ++k) broadcast_inner = broadcast_inner && (s[k] == 0 || s[k] == 1);
  broadcast_inner = broadcast_inner && !contiguous;
  std::tuple<std::array<In, kBlock>...> repeated;
  // One run of `len` elements along the last dimension, starting at offsets o.
  auto run = [&](const std::array<int64_t, N>& o, int64_t len) {
    Out* dst = out + o[0];
    if (contiguous) {
      for (int64_t i = 0; i < len; ++i) dst[i] = f((std::get<I>(in) + o[I + 1])[i]...);
    } else if (broadcast_inner) {
      [[maybe_unused]] const int64_t fill = std::min(kBlock, len);  // unused when f takes no input
      ((s[I + 1] == 0 ? void(std::fill_n(std::get<I>(repeated).data(), fill, *(std::get<I>(in) + o[I + 1]))) : void()),
       ...);
      for (int64_t b = 0; b < len; b += kBlock) {
        const int64_t m = std::min(kBlock, len - b);
        std::tuple<const In*...> src{(s[I + 1] == 0 ? std::get<I>(repeated).data() : std::get<I>(in) + o[I + 1] + b)...};
        for (int64_t i = 0; i < m; ++i) dst[b + i] = f(std::get<I>(src)[i]...);
      }
    } else {
      for (int64_t i = 0; i < len; ++i) dst[i * s[0]] = f((std::get<I>(in) + o[I + 1])[i * s[I + 1]]...);
    }
  };
  // Whole rows of the last two dimensions run as a plain double loop: short rows (a transpose of
  // [.., 4, 32] blocks) would otherwise pay the counter bookkeeping once per 32 elements.
  auto rows = [&](const std::array<int64_t, N>& off, int64_t count) {
    if (contiguous) {  // raw pointers, one add each per row: no offsets kept in memory
      Out* dst = out + off[0];
      std::tuple<const In*...> src{(std::get<I>(in) + off[I + 1])...};
      for (int64_t r = 0; r < count; ++r, dst += p.stride[0][nd - 2]) {
        for (int64_t i = 0; i < n; ++i) dst[i] = f(std::get<I>(src)[i]...);
        ((std::get<I>(src) += p.stride[I + 1][nd - 2]), ...);
      }
    } else {
      std::array<int64_t, N> o = off;
      for (int64_t r = 0; r < count; ++r) {
        run(o, n);
        for (int k = 0; k < N; ++k) o[k] += p.stride[k][nd - 2];
      }
    }
    return true;
  };
  strided_walk<N>(p, begin, end, run, rows);
}

// Elements per thread below which an elementwise op stays on the calling thread: a hand-off costs a
// few microseconds, about what 32K simple elements take.
constexpr int64_t kElementwiseGrain = 32768;

// Runs f over the whole plan, split across the intra-op threads when it is large (tensor/parallel.h).
template <typename F, typename Out, typename... In>
void strided_apply(const StridedPlan& p, const F& f, Out* out, const In*... in) {
  const std::tuple<const In*...> inputs(in...);
  parallel_for(0, p.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    strided_range(p, f, out, inputs, begin, end, std::index_sequence_for<In...>{});
  });
}

LOCKSTEP_ISA_END
