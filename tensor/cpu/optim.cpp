// cpu::sgd_step and cpu::adam_step (optim.h): one loop per combination of the options, fixed at compile
// time, over unaliased arrays, so each loop is branch-free and vectorizes. Each element is loaded into
// compute_t<T> (float32 for a 16-bit T; a no-op otherwise), updated and stored.
#include "tensor/cpu/optim.h"

#include <type_traits>

namespace lockstep::cpu {
namespace {

template <typename T, bool kMomentum, bool kFirst, bool kNesterov, typename C = compute_t<T>>
void sgd_loop(T* __restrict p, const T* __restrict g, T* __restrict m, int64_t n, const detail::SgdScalars<C>& s) {
  for (int64_t i = 0; i < n; ++i) {
    C pi = static_cast<C>(p[i]), mi = kMomentum && !kFirst ? static_cast<C>(m[i]) : C(0);
    detail::sgd_update<kMomentum, kFirst, kNesterov>(pi, static_cast<C>(g[i]), mi, s);
    p[i] = static_cast<T>(pi);
    if constexpr (kMomentum) m[i] = static_cast<T>(mi);
  }
}

template <typename T, bool kAmsgrad, bool kWeightDecay, bool kDecoupled, bool kMaximize, typename C = compute_t<T>>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax,
               int64_t n, detail::AdamScalars<C> s) {
  s.amsgrad = kAmsgrad;
  s.weight_decay = kWeightDecay;
  s.decoupled = kDecoupled;
  s.maximize = kMaximize;
  for (int64_t i = 0; i < n; ++i) {
    C pi = static_cast<C>(p[i]), mi = static_cast<C>(m[i]), vi = static_cast<C>(v[i]);
    C vmaxi = kAmsgrad ? static_cast<C>(vmax[i]) : C(0);
    detail::adam_update(pi, static_cast<C>(g[i]), mi, vi, vmaxi, s);
    p[i] = static_cast<T>(pi);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    if constexpr (kAmsgrad) vmax[i] = static_cast<T>(vmaxi);
  }
}

template <typename T>
void dispatch(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStepArgs& args) {
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
  dispatch(p, g, m, v, vmax, n, args);
}

// One row per dtype.
#define LOCKSTEP_OPTIM_STEPS(T)                                                                                \
  template void sgd_step<T>(T*, const T*, T*, int64_t, const detail::SgdScalars<compute_t<T>>&, bool, bool, \
                            bool);                                                                            \
  template void adam_step<T>(T*, const T*, T*, T*, T*, int64_t, const AdamStepArgs&);
LOCKSTEP_OPTIM_STEPS(float)
LOCKSTEP_OPTIM_STEPS(double)
LOCKSTEP_OPTIM_STEPS(BFloat16)
LOCKSTEP_OPTIM_STEPS(Float16)
#undef LOCKSTEP_OPTIM_STEPS

}  // namespace lockstep::cpu
