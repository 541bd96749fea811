// The elementwise rows on bfloat16 and float16 (tensor/cpu/elementwise_families.h): every operand is
// converted into float32 blocks of kBlock elements (float_blocks.h), the row's float32 loop runs over
// the blocks, and the result is rounded once as it is stored. Per row there is one small float32 loop,
// shared by both 16-bit dtypes and by every mix of them with float32 (the residual stream under
// autocast; a scalar, held in float32); the conversions are per dtype, not per row. Instantiating each
// row for each 16-bit dtype and each mix instead made tensor/cpu/elementwise.cpp the build's slowest
// compile, and float16's conversions did not vectorize inside those loops.
// Compiled once per ISA (tensor/cpu/isa.h); every header is included before LOCKSTEP_ISA_BEGIN.
#include <algorithm>
#include <array>
#include <cstdint>

#include "tensor/cpu/elementwise_families.h"
#include "tensor/cpu/float_blocks.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/strided_loop.h"
#include "tensor/elementwise_ops.h"
#include "tensor/parallel.h"

LOCKSTEP_ISA_BEGIN
namespace {

// Elements per block: three float32 buffers of 2 KiB stay in L1.
constexpr int64_t kBlock = 512;

// out[i] = f(a[i]) or f(a[i], b[i]) for i < n, on float32: out is float*, or bool* for rows that
// return bool. No __restrict: an in-place op writes where it reads.
// `s`: the row's scalars.
using BlockFn = void (*)(void* out, const float* a, const float* b, int64_t n, const OpScalars& s);

template <typename F>
void unary_block(void* out, const float* a, const float*, int64_t n, const OpScalars& s) {
  const F f{s};
  using R = decltype(f(0.f));
  R* y = static_cast<R*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i]);
}
template <typename F>
void binary_block(void* out, const float* a, const float* b, int64_t n, const OpScalars& s) {
  const F f{s};
  using R = decltype(f(0.f, 0.f));
  R* y = static_cast<R*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
}

// out = f(a[, b]) over p, every operand through float32 blocks; f null: out = a converted. A float32
// operand read contiguously is used in place, and a contiguous float32 (or bool) output written in place.
void apply_blocks(const StridedPlan& p, BlockFn f, const OpScalars& s, Dtype out_dt, void* out, Dtype a_dt,
                  const void* a, Dtype b_dt, const void* b) {
  if (p.numel == 0) return;
  const bool bool_out = f && out_dt == kBool;
  const size_t out_size = element_size(out_dt), a_size = element_size(a_dt), b_size = element_size(b_dt);
  const int last = p.nd - 1;
  const int64_t so = p.stride[0][last], sa = p.stride[1][last], sb = b ? p.stride[2][last] : 0;
  parallel_for(0, p.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    alignas(64) float abuf[kBlock], bbuf[kBlock], obuf[kBlock];
    auto run = [&](const std::array<int64_t, 3>& off, int64_t len) {
      char* o = static_cast<char*>(out) + off[0] * out_size;
      const char* x = static_cast<const char*>(a) + off[1] * a_size;
      const char* y = b ? static_cast<const char*>(b) + off[2] * b_size : nullptr;
      // A broadcast operand (stride 0: a scalar, a bias) is converted once per run, not per element.
      const bool a_once = sa == 0, b_once = y && sb == 0;
      if (a_once) {
        load_floats(a_dt, x, 0, 1, abuf);
        std::fill_n(abuf + 1, std::min(kBlock, len) - 1, abuf[0]);
      }
      if (b_once) {
        load_floats(b_dt, y, 0, 1, bbuf);
        std::fill_n(bbuf + 1, std::min(kBlock, len) - 1, bbuf[0]);
      }
      for (int64_t i = 0; i < len; i += kBlock) {
        const int64_t m = std::min(kBlock, len - i);
        char* dst = o + i * so * out_size;
        if (!f && out_dt == kFloat32 && so == 1) {
          load_floats(a_dt, x + i * sa * a_size, sa, m, reinterpret_cast<float*>(dst));
          continue;
        }
        const float* av = reinterpret_cast<const float*>(x) + i;
        if (a_dt != kFloat32 || sa != 1) {
          if (!a_once) load_floats(a_dt, x + i * sa * a_size, sa, m, abuf);
          av = abuf;
        }
        const float* bv = y ? reinterpret_cast<const float*>(y) + i : nullptr;
        if (y && (b_dt != kFloat32 || sb != 1)) {
          if (!b_once) load_floats(b_dt, y + i * sb * b_size, sb, m, bbuf);
          bv = bbuf;
        }
        if (!f) {
          store_floats(out_dt, dst, so, m, av);
        } else if (so == 1 && (out_dt == kFloat32 || bool_out)) {
          f(dst, av, bv, m, s);
        } else if (bool_out) {
          f(obuf, av, bv, m, s);
          const bool* r = reinterpret_cast<const bool*>(obuf);
          for (int64_t j = 0; j < m; ++j) reinterpret_cast<bool*>(dst)[j * so] = r[j];
        } else {
          f(obuf, av, bv, m, s);
          store_floats(out_dt, dst, so, m, obuf);
        }
      }
    };
    // A run at a time (the blocks take care of short rows): no whole-row path.
    strided_walk<3>(p, begin, end, run, [](const std::array<int64_t, 3>&, int64_t) { return false; });
  });
}

// Whether every operand of p runs contiguously (one flat dimension, strides 1): then bfloat16 rows take
// fused_bf16, not the blocks.
bool all_contiguous(const StridedPlan& p, int nops) {
  if (p.nd != 1) return false;
  for (int k = 0; k < nops; ++k)
    if (p.stride[k][0] != 1) return false;
  return true;
}

// out[i] = f(in[i]...) over n contiguous elements, each operand converted as it is loaded and the result
// rounded as it is stored (in_compute_type, tensor/elementwise_ops.h) in the one loop: bfloat16's
// conversions are a shift and an integer round, which vectorize inside any row. The hot case under
// autocast (bfloat16 activations, a float32 residual stream), where the blocks' extra passes through
// L1 cost a fifth of a streaming op; one contiguous loop per row and mix, not strided_loop.h's four.
template <typename T, typename F, typename Out, typename... In>
void fused_bf16(F f, int64_t n, Out* out, const In*... in) {
  const auto g = in_compute_type<T>(f);
  parallel_for(0, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = g(in[i]...);
  });
}

}  // namespace

void unary_half(UnaryOp op, const OpScalars& s, const StridedPlan& p, void* out, Dtype dt, const void* a) {
  if (dt == kBFloat16 && all_contiguous(p, 2)) {
    return visit_op(op, s, [&](auto f, auto) {
      using R = decltype(in_compute_type<BFloat16>(f)(BFloat16{}));
      fused_bf16<BFloat16>(f, p.numel, static_cast<R*>(out), static_cast<const BFloat16*>(a));
    });
  }
  const BlockFn f = visit_op(op, [](auto g, auto) -> BlockFn { return &unary_block<decltype(g)>; });
  apply_blocks(p, f, s, op_returns_bool(op) ? kBool : dt, out, dt, a, dt, nullptr);
}

void binary_half(BinaryOp op, const OpScalars& s, const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt,
                 const void* a, Dtype b_dt, const void* b) {
  // One 16-bit dtype, alone or beside float32 (tensor/cpu/elementwise.h); the ops layer promotes the rest.
  const bool ok = a_dt == b_dt ? is_reduced_floating_point(a_dt)
                               : (is_reduced_floating_point(a_dt) && b_dt == kFloat32) ||
                                     (a_dt == kFloat32 && is_reduced_floating_point(b_dt));
  LOCKSTEP_CHECK(ok, op_name(op), ": no kernel for ", dtype_name(a_dt), " with ", dtype_name(b_dt));
  // bfloat16 with bfloat16, or beside float32 into float32 (or bool), all contiguous: one fused loop.
  const bool bf16_only = a_dt == kBFloat16 && b_dt == kBFloat16;
  const bool with_f32 = out_dt != kBFloat16 && ((a_dt == kBFloat16 && b_dt == kFloat32) ||
                                                (a_dt == kFloat32 && b_dt == kBFloat16));
  // A bfloat16 tensor with a float32 scalar (stride 0; binary_scalar's operand) into bfloat16, either order.
  if (out_dt == kBFloat16 && p.nd == 1 && p.stride[0][0] == 1 &&
      ((a_dt == kBFloat16 && p.stride[1][0] == 1 && b_dt == kFloat32 && p.stride[2][0] == 0) ||
       (b_dt == kBFloat16 && p.stride[2][0] == 1 && a_dt == kFloat32 && p.stride[1][0] == 0))) {
    return visit_op(op, s, [&](auto f, auto) {
      const auto g = in_compute_type<BFloat16>(f);
      using R = decltype(g(BFloat16{}, 0.f));
      R* y = static_cast<R*>(out);
      const bool scalar_second = a_dt == kBFloat16;
      const float sv = *static_cast<const float*>(scalar_second ? b : a);
      const BFloat16* h = static_cast<const BFloat16*>(scalar_second ? a : b);
      parallel_for(0, p.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        if (scalar_second)
          for (int64_t i = begin; i < end; ++i) y[i] = g(h[i], sv);
        else
          for (int64_t i = begin; i < end; ++i) y[i] = g(sv, h[i]);
      });
    });
  }
  if ((bf16_only || with_f32) && all_contiguous(p, 3)) {
    return visit_op(op, s, [&](auto f, auto) {
      if (bf16_only) {
        using R = decltype(in_compute_type<BFloat16>(f)(BFloat16{}, BFloat16{}));
        fused_bf16<BFloat16>(f, p.numel, static_cast<R*>(out), static_cast<const BFloat16*>(a),
                             static_cast<const BFloat16*>(b));
      } else if (a_dt == kBFloat16) {
        using R = decltype(in_compute_type<float>(f)(BFloat16{}, float{}));
        fused_bf16<float>(f, p.numel, static_cast<R*>(out), static_cast<const BFloat16*>(a),
                          static_cast<const float*>(b));
      } else {
        using R = decltype(in_compute_type<float>(f)(float{}, BFloat16{}));
        fused_bf16<float>(f, p.numel, static_cast<R*>(out), static_cast<const float*>(a),
                          static_cast<const BFloat16*>(b));
      }
    });
  }
  const BlockFn f = visit_op(op, [](auto g, auto) -> BlockFn { return &binary_block<decltype(g)>; });
  apply_blocks(p, f, s, out_dt, out, a_dt, a, b_dt, b);
}

void copy_half(const StridedPlan& p, Dtype out_dt, void* out, Dtype a_dt, const void* a) {
  apply_blocks(p, nullptr, OpScalars{}, out_dt, out, a_dt, a, a_dt, nullptr);
}

LOCKSTEP_ISA_END
