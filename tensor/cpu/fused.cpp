// The CPU backend's fused kernels (tensor/backend.h's FusedKernels): softmax along a middle
// dimension (rows go to cpu/rows.cpp), LayerNorm (cpu/rows.cpp), GroupNorm (cpu/group_norm.cpp),
// BatchNorm (cpu/batch_norm.cpp), max pooling, average pooling (cpu/avg_pool2d.cpp), interpolate's
// resampling (cpu/resample.cpp), convolutions
// (oneDNN, cpu/conv2d_onednn.cpp), the NLL loss, the optimizer steps (cpu/optim.cpp, by
// tensor/optim_step.h's rules), uniform and normal draws (Philox: the reference for the device's), the
// LSTM and GRU cells (cpu/rnn_cells.cpp, by tensor/rnn_cell_ops.h's rules) and fused attention
// (cpu/attention.cpp, by tensor/attention_ops.h's).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/cpu/attention.h"
#include "tensor/cpu/avg_pool2d.h"
#include "tensor/cpu/batch_norm.h"
#include "tensor/cpu/conv2d_onednn.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/group_norm.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/optim.h"
#include "tensor/cpu/resample.h"
#include "tensor/cpu/rnn_cells.h"
#include "tensor/cpu/rows.h"
#include "tensor/parallel.h"
#include "tensor/philox.h"
#include "tensor/tensor.h"

namespace lockstep::cpu {
namespace {

void check_target(int64_t t, int64_t c, int64_t i, const char* op) {
  LOCKSTEP_CHECK(t >= 0 && t < c, op, ": target ", t, " at position ", i, " is out of range for ", c, " classes");
}

// The row kernels' dtypes: float32, float64, and bfloat16 and float16 (cpu/rows.cpp and
// cpu/rnn_cells.cpp compute them in float32).
template <typename Fn>
void dispatch_rows(Dtype d, const char* op, Fn&& fn) {
  if (d == kBFloat16) return fn(type_tag<BFloat16>{});
  if (d == kFloat16) return fn(type_tag<Float16>{});
  dispatch_floating(d, op, fn);
}

}  // namespace

void CpuBackend::layer_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight, const Tensor& bias,
                int64_t rows, int64_t n, double eps) {
  dispatch_rows(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(layer_norm_rows<T>, x.data<T>(), weight.defined() ? weight.data<T>() : nullptr,
                          bias.defined() ? bias.data<T>() : nullptr, y.data<T>(), mean.data<compute_t<T>>(),
                          rstd.data<compute_t<T>>(), rows, n, eps);
  });
}

void CpuBackend::layer_norm_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x, const Tensor& mean,
                         const Tensor& rstd, const Tensor& weight, int64_t rows, int64_t n) {
  dispatch_rows(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    LOCKSTEP_CPU_ISA_CALL(layer_norm_backward_rows<T>, gy.data<T>(), x.data<T>(), mean.data<compute_t<T>>(),
                          rstd.data<compute_t<T>>(),
                          ptr(weight), ptr(gx), ptr(gw), ptr(gb), rows, n);
  });
}

void CpuBackend::group_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                            const Tensor& bias, int64_t N, int64_t C, int64_t HW, int64_t G, double eps) {
  dispatch_rows(x.dtype(), "group_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    LOCKSTEP_CPU_ISA_CALL(group_norm<T>, x.data<T>(), ptr(weight), ptr(bias), y.data<T>(), mean.data<compute_t<T>>(),
                          rstd.data<compute_t<T>>(), N, C, HW, G, eps);
  });
}

void CpuBackend::group_norm_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& weight, int64_t N,
                                     int64_t C, int64_t HW, int64_t G) {
  dispatch_rows(x.dtype(), "group_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    LOCKSTEP_CPU_ISA_CALL(group_norm_backward<T>, gy.data<T>(), x.data<T>(), mean.data<compute_t<T>>(),
                          rstd.data<compute_t<T>>(), ptr(weight), ptr(gx), ptr(gw), ptr(gb), N, C, HW, G);
  });
}

// Batch norm on every floating dtype; a 16-bit input's weight and bias come as float32 (compute_t).
namespace {
template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
}  // namespace

void CpuBackend::batch_norm_stats(Tensor& sums, const Tensor& x, int64_t N, int64_t C, int64_t inner) {
  dispatch_rows(x.dtype(), "batch_norm_stats", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(batch_norm_stats<T>, x.data<T>(), sums.data<double>(), N, C, inner);
  });
}

void CpuBackend::batch_norm_elemt(Tensor& y, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                  const Tensor& weight, const Tensor& bias, int64_t N, int64_t C, int64_t inner) {
  dispatch_rows(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(batch_norm_elemt<T>, x.data<T>(), mean.data<double>(), invstd.data<double>(),
                          ptr_or_null<compute_t<T>>(weight), ptr_or_null<compute_t<T>>(bias), y.data<T>(), N, C, inner);
  });
}

void CpuBackend::batch_norm_backward_reduce(Tensor& sums, const Tensor& gy, const Tensor& x, const Tensor& mean,
                                            int64_t N, int64_t C, int64_t inner) {
  dispatch_rows(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(batch_norm_backward_reduce<T>, gy.data<T>(), x.data<T>(), mean.data<double>(),
                          sums.data<double>(), N, C, inner);
  });
}

void CpuBackend::batch_norm_backward_elemt(Tensor& gx, const Tensor& gy, const Tensor& x, const Tensor& mean,
                                           const Tensor& invstd, const Tensor& weight, const Tensor& sums,
                                           double count, int64_t N, int64_t C, int64_t inner) {
  dispatch_rows(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(batch_norm_backward_elemt<T>, gy.data<T>(), x.data<T>(), mean.data<double>(),
                          invstd.data<double>(), ptr_or_null<compute_t<T>>(weight), ptr_or_null<double>(sums), count,
                          gx.data<T>(), N, C, inner);
  });
}

void CpuBackend::softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner, bool log) {
  dispatch_rows(a.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = a.data<T>();
    T* y = out.data<T>();
    if (inner == 1) return LOCKSTEP_CPU_ISA_CALL(softmax_rows<T>, x, y, outer, n, log);  // cpu/rows.cpp
    // Along a middle dimension, float32 and float64 only (the ops layer gives 16-bit tensors float32 copies).
    if constexpr (std::is_same_v<compute_t<T>, T>) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* xr = x + o * n * inner + i;
          T* yr = y + o * n * inner + i;
          T m = -std::numeric_limits<T>::infinity();
          for (int64_t k = 0; k < n; ++k) m = std::max(m, xr[k * inner]);
          double s = 0;
          for (int64_t k = 0; k < n; ++k) s += std::exp(double(xr[k * inner] - m));
          for (int64_t k = 0; k < n; ++k)
            yr[k * inner] = log ? xr[k * inner] - (m + static_cast<T>(std::log(s)))
                                : static_cast<T>(std::exp(double(xr[k * inner] - m)) / s);
        }
    } else {
      fail(log ? "log_softmax" : "softmax", ": no ", a.dtype(), " kernel along a middle dimension");
    }
  });
}

void CpuBackend::softmax_backward(Tensor& gi, const Tensor& go, const Tensor& y, int64_t outer, int64_t n, int64_t inner,
                      bool log) {
  dispatch_rows(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (inner == 1)  // contiguous rows (attention, logits): cpu/rows.cpp
      return LOCKSTEP_CPU_ISA_CALL(softmax_backward_rows<T>, go.data<T>(), y.data<T>(), gi.data<T>(), outer, n, log);
    if constexpr (std::is_same_v<compute_t<T>, T>) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t base = o * n * inner + i;
          const T* g = go.data<T>() + base;
          const T* yr = y.data<T>() + base;
          T* r = gi.data<T>() + base;
          double s = 0;
          for (int64_t k = 0; k < n; ++k) s += log ? g[k * inner] : g[k * inner] * yr[k * inner];
          for (int64_t k = 0; k < n; ++k)
            r[k * inner] = log ? g[k * inner] - std::exp(yr[k * inner]) * static_cast<T>(s)
                               : yr[k * inner] * (g[k * inner] - static_cast<T>(s));
        }
    } else {
      fail("softmax_backward: no ", y.dtype(), " kernel along a middle dimension");
    }
  });
}

// bfloat16 and float16 planes as they are: rule::Argmax compares their values in float32, exactly, and
// the maximum is one of the inputs, so nothing is rounded.
void CpuBackend::max_pool2d(Tensor& out, Tensor& indices, const Tensor& x, const MaxPool2dArgs& a) {
  dispatch_rows(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t plane = a.H * a.W, out_plane = a.OH * a.OW;
    parallel_for(0, a.planes, std::max<int64_t>(1, kRowGrain / std::max<int64_t>(out_plane * a.kh * a.kw, 1)),
                 [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x.data<T>() + p * plane;
        T* y = out.data<T>() + p * out_plane;
        int64_t* ix = indices.data<int64_t>() + p * out_plane;
        for (int64_t oh = 0; oh < a.OH; ++oh)
          for (int64_t ow = 0; ow < a.OW; ++ow) {
            const int64_t first = oh * a.sh * a.W + ow * a.sw;
            int64_t at = first;
            for (int64_t i = 0; i < a.kh; ++i)
              for (int64_t j = 0; j < a.kw; ++j) {
                const int64_t q = first + i * a.dh * a.W + j * a.dw;
                if (rule::Argmax<T>::beats(xp[q], xp[at])) at = q;  // the first NaN, else the first max
              }
            y[oh * a.OW + ow] = xp[at];
            ix[oh * a.OW + ow] = p * plane + at;
          }
      }
    });
  });
}

// Every floating dtype, bfloat16 and float16 read as they are (the sum in double, rounded once).
void CpuBackend::nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) {
  dispatch_rows(logp.dtype(), "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t n = logp.size(0), c = logp.size(1);
    const T* lp = logp.data<T>();
    const int64_t* t = target.data<int64_t>();
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      check_target(t[i], c, i, "cross_entropy");
      s += static_cast<double>(static_cast<compute_t<T>>(lp[i * c + t[i]]));
    }
    *out.data<T>() = static_cast<T>(-s * scale);
  });
}

void CpuBackend::nll_loss_backward(Tensor& g, const Tensor& go, const Tensor& target, double scale) {
  dispatch_rows(g.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t n = g.size(0), c = g.size(1);
    const int64_t* t = target.data<int64_t>();
    const T v = static_cast<T>(-scale * static_cast<double>(static_cast<compute_t<T>>(*go.data<T>())));
    for (int64_t i = 0; i < n; ++i) {
      check_target(t[i], c, i, "cross_entropy backward");
      g.data<T>()[i * c + t[i]] = v;
    }
  });
}

void CpuBackend::sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, double lr, double momentum, double dampening,
              double wd, bool nesterov, bool first) {
  dispatch_rows(param.dtype(), "sgd_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const detail::SgdScalars<C> s{C(lr), C(momentum), C(1 - dampening), C(wd)};
    LOCKSTEP_CPU_ISA_CALL(sgd_step<T>, param.data<T>(), grad.data<T>(), momentum != 0 ? buf.data<T>() : nullptr,
                          param.numel(), s, momentum != 0, first, nesterov);
  });
}

void CpuBackend::adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& max_exp_avg_sq,
               const AdamStepArgs& args) {
  dispatch_rows(param.dtype(), "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(adam_step<T>, param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(),
                          args.amsgrad ? max_exp_avg_sq.data<T>() : nullptr, param.numel(), args);
  });
}

void CpuBackend::optim_step(OptimRule rule, Tensor& param, const Tensor& grad, std::array<Tensor*, 3> states,
                            const OptimStepArgs& args) {
  dispatch_rows(param.dtype(), "optim_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto ptr = [](Tensor* t) { return t && t->defined() ? t->data<T>() : nullptr; };
    LOCKSTEP_CPU_ISA_CALL(optim_step<T>, rule, param.data<T>(), grad.data<T>(), ptr(states[0]), ptr(states[1]),
                          ptr(states[2]), param.numel(), args);
  });
}

// Not reached by rand() or dropout on the host, which keep generator.h's stream; the references for the GPU's.

void CpuBackend::uniform(Tensor& out, double low, double high, uint64_t seed, uint64_t counter) {
  dispatch_floating(out.dtype(), "uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    const T lo = static_cast<T>(low), w = static_cast<T>(high - low);
    for (int64_t i = 0, n = out.numel(); i < n; ++i)
      p[i] = lo + w * detail::philox_uniform<T>(seed, counter + static_cast<uint64_t>(i));
  });
}

void CpuBackend::normal(Tensor& out, double mean, double std, uint64_t seed, uint64_t counter) {
  dispatch_floating(out.dtype(), "normal", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    const T m = static_cast<T>(mean), s = static_cast<T>(std);
    for (int64_t i = 0, n = out.numel(); i < n; ++i)
      p[i] = m + s * detail::philox_normal<T>(seed, counter + static_cast<uint64_t>(i));
  });
}

void CpuBackend::dropout_mask(Tensor& out, double p, uint64_t seed, uint64_t counter) {
  dispatch_floating(out.dtype(), "dropout_mask", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T keep = static_cast<T>(p), scale = static_cast<T>(1.0 / (1.0 - p));
    for (int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = detail::philox_uniform<T>(seed, counter + static_cast<uint64_t>(i)) >= keep ? scale : T(0);
  });
}

void CpuBackend::bernoulli(Tensor& out, const Tensor& p, uint64_t seed, uint64_t counter) {
  dispatch_floating(out.dtype(), "bernoulli", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T* pp = p.data<T>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i)
      o[i] = detail::philox_uniform<T>(seed, counter + static_cast<uint64_t>(i)) < pp[i] ? T(1) : T(0);
  });
}

void CpuBackend::lstm_cell(Tensor& gates, Tensor& h, Tensor& c, const Tensor& x_gates, const Tensor& c_prev,
                           int64_t rows, int64_t n) {
  dispatch_rows(gates.dtype(), "lstm_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(lstm_cell_rows<T>, gates.data<T>(), h.data<T>(), c.data<T>(), x_gates.data<T>(),
                          c_prev.data<T>(), rows, n);
  });
}

void CpuBackend::lstm_cell_backward(Tensor& d_gates, Tensor& d_c_prev, const Tensor& gates, const Tensor& c_prev,
                                    const Tensor& c, const Tensor& d_h, const Tensor& d_c, int64_t rows, int64_t n) {
  dispatch_rows(gates.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(lstm_cell_backward_rows<T>, d_gates.data<T>(), d_c_prev.data<T>(), gates.data<T>(),
                          c_prev.data<T>(), c.data<T>(), d_h.data<T>(), d_c.data<T>(), rows, n);
  });
}

void CpuBackend::gru_cell(Tensor& gates, Tensor& h, const Tensor& x_gates, const Tensor& h_gates, const Tensor& h_prev,
                          int64_t rows, int64_t n) {
  dispatch_rows(gates.dtype(), "gru_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(gru_cell_rows<T>, gates.data<T>(), h.data<T>(), x_gates.data<T>(), h_gates.data<T>(),
                          h_prev.data<T>(), rows, n);
  });
}

void CpuBackend::gru_cell_backward(Tensor& d_x_gates, Tensor& d_h_gates, Tensor& d_h_prev, const Tensor& gates,
                                   const Tensor& h_gates, const Tensor& h_prev, const Tensor& d_h, int64_t rows,
                                   int64_t n) {
  dispatch_rows(gates.dtype(), "gru_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(gru_cell_backward_rows<T>, d_x_gates.data<T>(), d_h_gates.data<T>(), d_h_prev.data<T>(),
                          gates.data<T>(), h_gates.data<T>(), h_prev.data<T>(), d_h.data<T>(), rows, n);
  });
}

// float32, float64, bfloat16 and float16 (computed in float32, lse float32); bfloat16 on vdpbf16ps where
// the CPU has AVX512-BF16 and the head sizes are even.
void CpuBackend::attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& mask, const AttentionArgs& args) {
  const void* m = mask.defined() ? mask.data_ptr() : nullptr;
  if (q.dtype() == kBFloat16 && use_avx512_bf16() && avx512_bf16::attention_applies(args))
    return avx512_bf16::attention_forward(args, q.data<BFloat16>(), k.data<BFloat16>(), v.data<BFloat16>(), m,
                                          out.data<BFloat16>(), lse.data<float>());
  dispatch_rows(q.dtype(), "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(attention_forward<T>, args, q.data<T>(), k.data<T>(), v.data<T>(), m, out.data<T>(),
                          lse.data<attention_acc_t<T>>());
  });
}

void CpuBackend::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& grad_out, const Tensor& q,
                                    const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
                                    const Tensor& lse, const AttentionArgs& args) {
  const void* m = mask.defined() ? mask.data_ptr() : nullptr;
  if (q.dtype() == kBFloat16 && use_avx512_bf16() && avx512_bf16::attention_applies(args))
    return avx512_bf16::attention_backward(args, q.data<BFloat16>(), k.data<BFloat16>(), v.data<BFloat16>(), m,
                                           out.data<BFloat16>(), lse.data<float>(), grad_out.data<BFloat16>(),
                                           dq.data<BFloat16>(), dk.data<BFloat16>(), dv.data<BFloat16>());
  dispatch_rows(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(attention_backward<T>, args, q.data<T>(), k.data<T>(), v.data<T>(), m, out.data<T>(),
                          lse.data<attention_acc_t<T>>(), grad_out.data<T>(), dq.data<T>(), dk.data<T>(),
                          dv.data<T>());
  });
}

// One dimension's resampling: one kernel per dtype, compiled per ISA (cpu/resample.h).
void CpuBackend::resample(Tensor& y, const Tensor& x, const ResampleArgs& a) {
  dispatch_rows(x.dtype(), "resample", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(resample<T>, x.data<T>(), y.data<T>(), a);
  });
}

void CpuBackend::resample_backward(Tensor& gx, const Tensor& gy, const ResampleArgs& a) {
  dispatch_rows(gy.dtype(), "resample_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_CPU_ISA_CALL(resample_backward<T>, gy.data<T>(), gx.data<T>(), a);
  });
}

// Average pooling: one kernel per dtype (float32 sums), compiled per ISA (cpu/avg_pool2d.h).
void CpuBackend::avg_pool2d(Tensor& y, const Tensor& x, const AvgPool2dArgs& a) {
  dispatch_rows(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) fail("avg_pool2d: no float64 kernel on the CPU");
    else LOCKSTEP_CPU_ISA_CALL(avg_pool2d_planes<T>, x.data<T>(), y.data<T>(), a);
  });
}

void CpuBackend::avg_pool2d_backward(Tensor& gx, const Tensor& gy, const AvgPool2dArgs& a) {
  dispatch_rows(gy.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) fail("avg_pool2d_backward: no float64 kernel on the CPU");
    else LOCKSTEP_CPU_ISA_CALL(avg_pool2d_backward_planes<T>, gy.data<T>(), gx.data<T>(), a);
  });
}

void CpuBackend::conv2d(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                        const internal::Conv2dParams& p) {
  onednn_conv2d(y, x, w, b, p);
}

void CpuBackend::conv2d_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x,
                                 const Tensor& w, const internal::Conv2dParams& p) {
  onednn_conv2d_backward(gx, gw, gb, gy, x, w, p);
}

}  // namespace lockstep::cpu
