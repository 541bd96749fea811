// The CPU backend's one elementwise loop: out[i] = f(in0[i], in1[i], ...) over a StridedPlan, for
// every op in the elementwise table. The innermost dimension runs as a flat loop (vectorized when
// every operand is contiguous there); outer dimensions advance by carrying counters, so a range of
// elements [begin, end) can start anywhere (what splitting the work across threads needs).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "tensor/backend.h"

namespace lockstep::cpu {

template <typename F, typename Out, typename... In, size_t... I>
void strided_range(const StridedPlan& p, const F& f, Out* out, std::tuple<const In*...> in, int64_t begin,
                   int64_t end, std::index_sequence<I...>) {
  constexpr int N = 1 + sizeof...(In);
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
  std::array<int64_t, N> s;
  for (int k = 0; k < N; ++k) s[k] = p.stride[k][nd - 1];
  bool contiguous = true;
  for (int k = 0; k < N; ++k) contiguous = contiguous && s[k] == 1;
  for (int64_t pos = begin; pos < end;) {
    const int64_t run = std::min(n - idx[nd - 1], end - pos);
    Out* o = out + off[0];
    if (contiguous) {
      for (int64_t i = 0; i < run; ++i) o[i] = f((std::get<I>(in) + off[I + 1])[i]...);
    } else {
      for (int64_t i = 0; i < run; ++i) o[i * s[0]] = f((std::get<I>(in) + off[I + 1])[i * s[I + 1]]...);
    }
    pos += run;
    idx[nd - 1] += run;
    for (int k = 0; k < N; ++k) off[k] += run * s[k];
    for (int d = nd - 1; d > 0 && idx[d] == p.shape[d]; --d) {
      for (int k = 0; k < N; ++k) off[k] += p.stride[k][d - 1] - idx[d] * p.stride[k][d];
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// Runs f over the whole plan.
template <typename F, typename Out, typename... In>
void strided_apply(const StridedPlan& p, const F& f, Out* out, const In*... in) {
  strided_range(p, f, out, std::tuple<const In*...>(in...), 0, p.numel, std::index_sequence_for<In...>{});
}

}  // namespace lockstep::cpu
