// cpu::sgd_step and cpu::adam_step (optim.h): one loop per combination of the options, fixed at compile
// time, over unaliased arrays, so each loop is branch-free and vectorizes (16 float32 lanes in the
// AVX-512 build). A bfloat16 or float16 step runs the float32 loop over blocks: each block of the
// parameter, gradient and state is widened into float32 buffers (float_blocks.h: a shift or vcvtph2ps
// per vector), updated by the same loop, and rounded back (an integer round or vcvtps2ph per vector).
// The buffers stay in L1, so the step streams its 16-bit arrays once, as PyTorch's fused kernel; the
// scalar per-element conversions it replaces did not vectorize (4.5x PyTorch's time). Every header is
// included before LOCKSTEP_ISA_BEGIN (isa.h says why).
#include "tensor/cpu/optim.h"

#include <algorithm>
#include <type_traits>

#include "tensor/cpu/float_blocks.h"
#include "tensor/cpu/isa.h"

LOCKSTEP_ISA_BEGIN
namespace {

// Elements per float32 block of a 16-bit step: five 1 KiB buffers (p, g, m, v, vmax), well inside L1.
constexpr int64_t kBlock = 256;

template <typename T>
constexpr bool kHalf = !std::is_same_v<compute_t<T>, T>;

template <typename T>
void to_block(const T* src, float* dst, int64_t n) {
  load_floats(dtype_of<T>::value, src, 1, n, dst);
}
template <typename T>
void from_block(const float* src, T* dst, int64_t n) {
  store_floats(dtype_of<T>::value, dst, 1, n, src);
}

template <typename T, bool kMomentum, bool kFirst, bool kNesterov, typename C = compute_t<T>>
void sgd_loop(T* __restrict p, const T* __restrict g, T* __restrict m, int64_t n, const detail::SgdScalars<C>& s) {
  if constexpr (kHalf<T>) {
    alignas(64) float bp[kBlock], bg[kBlock], bm[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t k = std::min(kBlock, n - i);
      to_block(p + i, bp, k);
      to_block(g + i, bg, k);
      if (kMomentum && !kFirst) to_block(m + i, bm, k);
      sgd_loop<float, kMomentum, kFirst, kNesterov>(bp, bg, bm, k, s);
      from_block(bp, p + i, k);
      if (kMomentum) from_block(bm, m + i, k);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      C pi = p[i], mi = kMomentum && !kFirst ? m[i] : C(0);
      detail::sgd_update<kMomentum, kFirst, kNesterov>(pi, g[i], mi, s);
      p[i] = pi;
      if constexpr (kMomentum) m[i] = mi;
    }
  }
}

template <typename T, bool kAmsgrad, bool kWeightDecay, bool kDecoupled, bool kMaximize, typename C = compute_t<T>>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax,
               int64_t n, detail::AdamScalars<C> s) {
  if constexpr (kHalf<T>) {
    alignas(64) float bp[kBlock], bg[kBlock], bm[kBlock], bv[kBlock], bx[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t k = std::min(kBlock, n - i);
      to_block(p + i, bp, k);
      to_block(g + i, bg, k);
      to_block(m + i, bm, k);
      to_block(v + i, bv, k);
      if (kAmsgrad) to_block(vmax + i, bx, k);
      adam_loop<float, kAmsgrad, kWeightDecay, kDecoupled, kMaximize>(bp, bg, bm, bv, bx, k, s);
      from_block(bp, p + i, k);
      from_block(bm, m + i, k);
      from_block(bv, v + i, k);
      if (kAmsgrad) from_block(bx, vmax + i, k);
    }
  } else {
    s.amsgrad = kAmsgrad;
    s.weight_decay = kWeightDecay;
    s.decoupled = kDecoupled;
    s.maximize = kMaximize;
    for (int64_t i = 0; i < n; ++i) {
      C pi = p[i], mi = m[i], vi = v[i], vmaxi = kAmsgrad ? vmax[i] : C(0);
      detail::adam_update(pi, g[i], mi, vi, vmaxi, s);
      p[i] = pi;
      m[i] = mi;
      v[i] = vi;
      if constexpr (kAmsgrad) vmax[i] = vmaxi;
    }
  }
}

}  // namespace

template <typename T>
void sgd_step(T* p, const T* g, T* m, int64_t n, const detail::SgdScalars<compute_t<T>>& s, bool momentum,
              bool first, bool nesterov) {
  detail::visit_sgd_options(momentum, first, nesterov, [&](auto mom, auto fst, auto nes) {
    sgd_loop<T, decltype(mom)::value, decltype(fst)::value, decltype(nes)::value>(p, g, m, n, s);
  });
}

template <typename T>
void adam_step(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStepArgs& args) {
  const detail::AdamScalars<compute_t<T>> s(args);
  auto run = [&](auto ams, auto wd, auto dec, auto max) {
    adam_loop<T, decltype(ams)::value, decltype(wd)::value, decltype(dec)::value, decltype(max)::value>(
        p, g, m, v, vmax, n, s);
  };
  using F = std::false_type;
  using Tr = std::true_type;
  auto with_max = [&](auto ams, auto wd, auto dec) { s.maximize ? run(ams, wd, dec, Tr{}) : run(ams, wd, dec, F{}); };
  auto with_wd = [&](auto ams) {
    if (!s.weight_decay) with_max(ams, F{}, F{});
    else if (s.decoupled) with_max(ams, Tr{}, Tr{});
    else with_max(ams, Tr{}, F{});
  };
  s.amsgrad ? with_wd(Tr{}) : with_wd(F{});
}

// The table's rows: one loop per row and combination of its options, fixed at compile time as adam_loop's
// are (the flags set in the scalars from template arguments fold away once the rule is inlined), over
// unaliased arrays, so each loop is branch-free and vectorizes. States a combination does not use are
// neither read nor written. In compute_t<T>: a 16-bit parameter and its state are widened per element.
// flatten: the rule is inlined into the loop (RMSprop's, called per element, stayed scalar: 1.6x PyTorch).
template <typename T, OptimRule kRule, bool kMaximize, bool kWeightDecay, bool kCentered, bool kMomentum>
[[gnu::flatten]] void optim_loop(T* __restrict p, const T* __restrict g, T* __restrict s0, T* __restrict s1, T* __restrict s2,
                int64_t n, detail::OptimScalars<compute_t<T>> s) {
  using C = compute_t<T>;
  s.maximize = kMaximize, s.has_weight_decay = kWeightDecay, s.centered = kCentered, s.has_momentum = kMomentum;
  constexpr bool kUses1 = kRule == OptimRule::RMSprop && kCentered, kUses2 = kRule == OptimRule::RMSprop && kMomentum;
  for (int64_t i = 0; i < n; ++i) {
    C pi = static_cast<C>(p[i]), a = static_cast<C>(s0[i]), b = C(0), c = C(0);
    if constexpr (kUses1) b = static_cast<C>(s1[i]);
    if constexpr (kUses2) c = static_cast<C>(s2[i]);
    if constexpr (kRule == OptimRule::Adagrad) detail::adagrad_update(pi, static_cast<C>(g[i]), a, s);
    else detail::rmsprop_update(pi, static_cast<C>(g[i]), a, b, c, s);
    p[i] = static_cast<T>(pi);
    s0[i] = static_cast<T>(a);
    if constexpr (kUses1) s1[i] = static_cast<T>(b);
    if constexpr (kUses2) s2[i] = static_cast<T>(c);
  }
}

template <typename T>
void optim_step(OptimRule rule, T* p, const T* g, T* s0, T* s1, T* s2, int64_t n, const OptimStepArgs& args) {
  const detail::OptimScalars<compute_t<T>> s(args);
  using F = std::false_type;
  using Tr = std::true_type;
  auto pick = [](bool b, auto f) { return b ? f(Tr{}) : f(F{}); };
  auto run = [&](auto rule_c, auto max, auto wd, auto centered, auto momentum) {
    optim_loop<T, decltype(rule_c)::value, decltype(max)::value, decltype(wd)::value, decltype(centered)::value,
               decltype(momentum)::value>(p, g, s0, s1, s2, n, s);
  };
  pick(s.maximize, [&](auto max) {
    pick(s.has_weight_decay, [&](auto wd) {
      if (rule == OptimRule::Adagrad) {
        run(std::integral_constant<OptimRule, OptimRule::Adagrad>{}, max, wd, F{}, F{});
      } else {
        pick(s.centered, [&](auto centered) {
          pick(s.has_momentum, [&](auto momentum) {
            run(std::integral_constant<OptimRule, OptimRule::RMSprop>{}, max, wd, centered, momentum);
          });
        });
      }
    });
  });
}

// One row per dtype.
#define LOCKSTEP_OPTIM_STEPS(T)                                                                                \
  template void sgd_step<T>(T*, const T*, T*, int64_t, const detail::SgdScalars<compute_t<T>>&, bool, bool, \
                            bool);                                                                            \
  template void adam_step<T>(T*, const T*, T*, T*, T*, int64_t, const AdamStepArgs&);                         \
  template void optim_step<T>(OptimRule, T*, const T*, T*, T*, T*, int64_t, const OptimStepArgs&);
LOCKSTEP_OPTIM_STEPS(float)
LOCKSTEP_OPTIM_STEPS(double)
LOCKSTEP_OPTIM_STEPS(BFloat16)
LOCKSTEP_OPTIM_STEPS(Float16)
#undef LOCKSTEP_OPTIM_STEPS

LOCKSTEP_ISA_END
