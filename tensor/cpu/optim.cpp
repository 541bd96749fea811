// cpu::sgd_step and cpu::adam_step (optim.h): one loop per combination of the options, fixed at compile
// time, over unaliased arrays, so each loop is branch-free and vectorizes.
#include "tensor/cpu/optim.h"

#include <type_traits>

namespace lockstep::cpu {
namespace {

template <typename T, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_loop(T* __restrict p, const T* __restrict g, T* __restrict m, int64_t n, const detail::SgdScalars<T>& s) {
  T unused = 0;
  for (int64_t i = 0; i < n; ++i)
    detail::sgd_update<kMomentum, kFirst, kNesterov>(p[i], g[i], kMomentum ? m[i] : unused, s);
}

template <typename T, bool kAmsgrad, bool kWeightDecay, bool kDecoupled, bool kMaximize>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax,
               int64_t n, detail::AdamScalars<T> s) {
  s.amsgrad = kAmsgrad;
  s.weight_decay = kWeightDecay;
  s.decoupled = kDecoupled;
  s.maximize = kMaximize;
  T unused = 0;
  for (int64_t i = 0; i < n; ++i) detail::adam_update(p[i], g[i], m[i], v[i], kAmsgrad ? vmax[i] : unused, s);
}

template <typename T>
void dispatch(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStepArgs& args) {
  const detail::AdamScalars<T> s(args);
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
void sgd_step(T* p, const T* g, T* m, int64_t n, const detail::SgdScalars<T>& s, bool momentum, bool first,
              bool nesterov) {
  detail::visit_sgd_options(momentum, first, nesterov, [&](auto mom, auto fst, auto nes) {
    sgd_loop<T, decltype(mom)::value, decltype(fst)::value, decltype(nes)::value>(p, g, m, n, s);
  });
}
template void sgd_step<float>(float*, const float*, float*, int64_t, const detail::SgdScalars<float>&, bool, bool,
                              bool);
template void sgd_step<double>(double*, const double*, double*, int64_t, const detail::SgdScalars<double>&, bool,
                               bool, bool);

void adam_step(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamStepArgs& args) {
  dispatch(p, g, m, v, vmax, n, args);
}

void adam_step(double* p, const double* g, double* m, double* v, double* vmax, int64_t n, const AdamStepArgs& args) {
  dispatch(p, g, m, v, vmax, n, args);
}

}  // namespace lockstep::cpu
