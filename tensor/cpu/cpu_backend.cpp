// The CPU backend: lockstep's kernels on host memory. Elementwise ops are in cpu/elementwise.cpp,
// softmax and LayerNorm in cpu/rows.cpp (each built per ISA, cpu/isa.h), GEMM in cpu/gemm.h; the rest
// are plain loops over contiguous [outer, n, inner] views.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

#include "common/env.h"
#include "tensor/backend.h"
#include "tensor/cpu/adam.h"
#include "tensor/cpu/block_cache.h"
#include "tensor/cpu/elementwise.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/reduce.h"
#include "tensor/cpu/row_reduce.h"
#include "tensor/cpu/rows.h"
#include "tensor/parallel.h"
#include "tensor/philox.h"
#include "tensor/tensor.h"

namespace lockstep {
namespace {

using fn::is_nan;  // the elementwise table's NaN test, shared with the CUDA reductions

// max/min propagate NaN; argmax/argmin pick the first NaN, else the first extreme (as PyTorch).
template <typename T>
bool better(T v, T best, bool is_max) {
  if (is_nan(best)) return false;
  if (is_nan(v)) return true;
  return is_max ? v > best : v < best;
}

// torch.optim.SGD's update for one parameter, with the options fixed at compile time and the three
// arrays declared unaliased (distinct tensors: internal::sgd_step_ checks), so the loop has no branch
// and vectorizes.
template <typename T>
struct SgdArgs {
  T* param;
  const T* grad;
  T* momentum_buffer;  // null without momentum
  int64_t n;
  T lr, momentum, one_minus_dampening, weight_decay;
};

template <typename T, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_kernel(const SgdArgs<T>& a) {
  T* __restrict p = a.param;
  const T* __restrict g = a.grad;
  T* __restrict m = a.momentum_buffer;
  for (int64_t i = 0; i < a.n; ++i) {
    T d = g[i] + a.weight_decay * p[i];
    if constexpr (kMomentum) {
      const T mi = kFirst ? d : a.momentum * m[i] + a.one_minus_dampening * d;
      m[i] = mi;
      d = kNesterov ? d + a.momentum * mi : mi;
    }
    p[i] -= a.lr * d;
  }
}

void check_index(int64_t v, int64_t n, int64_t pos, const char* op) {
  LOCKSTEP_CHECK(v >= 0 && v < n, op, ": index ", v, " at position ", pos, " is out of range for a dimension of size ",
                 n);
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : cache_(size_t(env_int("LOCKSTEP_CPU_CACHE_MB", 1024, 0, 1 << 20)) << 20) {}
  void* allocate(size_t nbytes, Device) override {
    size_t rounded = (nbytes + 63) / 64 * 64;
    if (void* p = cache_.take(rounded)) return p;
    void* p = std::aligned_alloc(64, rounded);
    LOCKSTEP_CHECK(p, "CPU allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t nbytes, Device) override {
    if (!p || !cache_.put(p, (nbytes + 63) / 64 * 64)) std::free(p);
  }
  void synchronize(Device) override {}

  void copy(Tensor& dst, const Tensor& src) override {
    LOCKSTEP_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "copy: CPU backend asked to copy ", src.device(),
                   " to ", dst.device());
    std::memmove(dst.data_ptr(), src.data_ptr(), dst.nbytes());
  }

  // Elementwise kernels: tensor/cpu/elementwise.cpp, in the processor's widest ISA build.
  void fill(const StridedPlan& p, Tensor& out, double v) override {
    LOCKSTEP_CPU_ISA_CALL(fill, p, out.dtype(), out.data_ptr(), v);
  }
  void copy_(const StridedPlan& p, Tensor& out, const Tensor& a) override {
    LOCKSTEP_CPU_ISA_CALL(copy_, p, out.dtype(), out.data_ptr(), a.dtype(), a.data_ptr());
  }
  void unary(UnaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a) override {
    LOCKSTEP_CPU_ISA_CALL(unary, op, p, out.data_ptr(), a.dtype(), a.data_ptr());
  }
  void binary(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, const Tensor& b) override {
    LOCKSTEP_CPU_ISA_CALL(binary, op, p, out.data_ptr(), a.dtype(), a.data_ptr(), b.data_ptr());
  }
  // The scalar becomes an operand of stride 0, so binary's kernels serve (one instantiation per op and
  // dtype instead of three); it lives on the stack, as wide as the widest dtype.
  void binary_scalar(BinaryOp op, const StridedPlan& p, Tensor& out, const Tensor& a, double s,
                     bool reverse) override {
    alignas(8) unsigned char scalar[8];
    dispatch_compute(a.dtype(), op_name(op), [&](auto tag) {
      using T = typename decltype(tag)::type;
      static_assert(sizeof(T) <= sizeof scalar);
      *reinterpret_cast<T*>(scalar) = static_cast<T>(s);
    });
    StridedPlan q = p;
    for (int d = 0; d < q.nd; ++d) {
      q.stride[2][d] = reverse ? p.stride[1][d] : 0;
      q.stride[1][d] = reverse ? 0 : p.stride[1][d];
    }
    LOCKSTEP_CPU_ISA_CALL(binary, op, q, out.data_ptr(), a.dtype(), reverse ? scalar : a.data_ptr(),
                          reverse ? a.data_ptr() : scalar);
  }
  void where(const StridedPlan& p, Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    LOCKSTEP_CPU_ISA_CALL(where, p, out.data_ptr(), a.dtype(), cond.data<bool>(), a.data_ptr(), b.data_ptr());
  }

  void gemm(Tensor& out, const Tensor& a, const Tensor& b, const GemmArgs& args) override {
    const GemmArgs g = args.bias ? gemm_bias_first(out, args) : args;
    dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* pc = out.data<T>();
      for (int64_t i = 0; i < g.batch; ++i)
        cpu::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, static_cast<T>(g.alpha), pa + i * g.batch_stride_a, g.lda,
                  pb + i * g.batch_stride_b, g.ldb, static_cast<T>(g.beta), pc + i * g.batch_stride_c, g.ldc);
    });
  }

  // tensor/cpu/reduce.cpp, by the rules of tensor/reduce_ops.h.
  void reduce(Reduction op, Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner) override {
    LOCKSTEP_CPU_ISA_CALL(reduce, op, a.dtype(), a.data_ptr(), out.data_ptr(), outer, n, inner);
  }

  void layer_norm(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  int64_t rows, int64_t n, double eps) override {
    dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      LOCKSTEP_CPU_ISA_CALL(layer_norm_rows<T>, x.data<T>(), weight.defined() ? weight.data<T>() : nullptr,
                            bias.defined() ? bias.data<T>() : nullptr, y.data<T>(), mean.data<T>(), rstd.data<T>(),
                            rows, n, eps);
    });
  }

  void layer_norm_backward(Tensor& gx, Tensor& gw, Tensor& gb, const Tensor& gy, const Tensor& x, const Tensor& mean,
                           const Tensor& rstd, const Tensor& weight, int64_t rows, int64_t n) override {
    dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
      LOCKSTEP_CPU_ISA_CALL(layer_norm_backward_rows<T>, gy.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(),
                            ptr(weight), ptr(gx), ptr(gw), ptr(gb), rows, n);
    });
  }

  void softmax(Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner, bool log) override {
    dispatch_floating(a.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = a.data<T>();
      T* y = out.data<T>();
      if (inner == 1) return LOCKSTEP_CPU_ISA_CALL(softmax_rows<T>, x, y, outer, n, log);  // cpu/rows.cpp
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
    });
  }

  void softmax_backward(Tensor& gi, const Tensor& go, const Tensor& y, int64_t outer, int64_t n, int64_t inner,
                        bool log) override {
    dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (inner == 1)  // contiguous rows (attention, logits): cpu/rows.cpp
        return LOCKSTEP_CPU_ISA_CALL(softmax_backward_rows<T>, go.data<T>(), y.data<T>(), gi.data<T>(), outer, n, log);
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
    });
  }

  void max_pool2d(Tensor& out, Tensor& indices, const Tensor& x, const MaxPool2dArgs& a) override {
    dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t plane = a.H * a.W, out_plane = a.OH * a.OW;
      parallel_for(0, a.planes, std::max<int64_t>(1, cpu::kRowGrain / std::max<int64_t>(out_plane * a.kh * a.kw, 1)),
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
                  if (better(xp[q], xp[at], true)) at = q;
                }
              y[oh * a.OW + ow] = xp[at];
              ix[oh * a.OW + ow] = p * plane + at;
            }
        }
      });
    });
  }

  static void check_target(int64_t t, int64_t c, int64_t i, const char* op) {
    LOCKSTEP_CHECK(t >= 0 && t < c, op, ": target ", t, " at position ", i, " is out of range for ", c, " classes");
  }

  void nll_loss(Tensor& out, const Tensor& logp, const Tensor& target, double scale) override {
    dispatch_floating(logp.dtype(), "nll_loss", [&](auto tag) {
      using T = typename decltype(tag)::type;
      int64_t n = logp.size(0), c = logp.size(1);
      const T* lp = logp.data<T>();
      const int64_t* t = target.data<int64_t>();
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        check_target(t[i], c, i, "cross_entropy");
        s += lp[i * c + t[i]];
      }
      *out.data<T>() = static_cast<T>(-s * scale);
    });
  }

  void nll_loss_backward(Tensor& g, const Tensor& go, const Tensor& target, double scale) override {
    dispatch_floating(g.dtype(), "nll_loss_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      int64_t n = g.size(0), c = g.size(1);
      const int64_t* t = target.data<int64_t>();
      T v = static_cast<T>(-scale * static_cast<double>(*go.data<T>()));
      for (int64_t i = 0; i < n; ++i) {
        check_target(t[i], c, i, "cross_entropy backward");
        g.data<T>()[i * c + t[i]] = v;
      }
    });
  }

  void index_select(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n,
                    int64_t inner) override {
    const int64_t k = index.numel();
    const size_t row = inner * element_size(a.dtype());
    const int64_t* idx = index.data<int64_t>();
    for (int64_t j = 0; j < k; ++j) check_index(idx[j], n, j, "index_select");
    const char* src = static_cast<const char*>(a.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < k; ++j) std::memcpy(dst + (o * k + j) * row, src + (o * n + idx[j]) * row, row);
  }

  void index_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                 int64_t inner) override {
    dispatch_compute(out.dtype(), "index_add_", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t k = index.numel();
      const int64_t* idx = index.data<int64_t>();
      for (int64_t j = 0; j < k; ++j) check_index(idx[j], n, j, "index_add_");
      T* d = out.data<T>();
      const T* s = src.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < k; ++j) {
          T* dr = d + (o * n + idx[j]) * inner;
          const T* sr = s + (o * k + j) * inner;
          for (int64_t i = 0; i < inner; ++i) dr[i] = static_cast<T>(dr[i] + sr[i]);
        }
    });
  }

  void gather(Tensor& out, const Tensor& a, const Tensor& index, int64_t outer, int64_t n, int64_t inner) override {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t k = index.numel() / (outer * inner);
      const int64_t* idx = index.data<int64_t>();
      const T* x = a.data<T>();
      T* y = out.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < k; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t pos = (o * k + j) * inner + i, v = idx[pos];
            check_index(v, n, pos, "gather");
            y[pos] = x[(o * n + v) * inner + i];
          }
    });
  }

  void scatter_add(Tensor& out, const Tensor& index, const Tensor& src, int64_t outer, int64_t n,
                   int64_t inner) override {
    dispatch_compute(out.dtype(), "scatter_add_", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t k = index.numel() / (outer * inner);
      const int64_t* idx = index.data<int64_t>();
      const T* s = src.data<T>();
      T* y = out.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < k; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t pos = (o * k + j) * inner + i, v = idx[pos];
            check_index(v, n, pos, "scatter_add_");
            T& d = y[(o * n + v) * inner + i];
            d = static_cast<T>(d + s[pos]);
          }
    });
  }

  void sort(Tensor& values, Tensor& indices, const Tensor& a, int64_t rows, int64_t n, bool descending) override {
    dispatch_compute(a.dtype(), "sort", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = a.data<T>();
      T* v = values.data<T>();
      int64_t* ix = indices.data<int64_t>();
      // NaN sorts as the largest value, as PyTorch.
      auto less = [](T p, T q) { return !is_nan(p) && (is_nan(q) || p < q); };
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = x + r * n;
        int64_t* ir = ix + r * n;
        std::iota(ir, ir + n, int64_t{0});
        if (descending) std::stable_sort(ir, ir + n, [&](int64_t i, int64_t j) { return less(row[j], row[i]); });
        else std::stable_sort(ir, ir + n, [&](int64_t i, int64_t j) { return less(row[i], row[j]); });
        for (int64_t i = 0; i < n; ++i) v[r * n + i] = row[ir[i]];
      }
    });
  }

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, double lr, double momentum, double dampening,
                double wd, bool nesterov, bool first) override {
    dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const SgdArgs<T> a{param.data<T>(), grad.data<T>(), momentum != 0 ? buf.data<T>() : nullptr, param.numel(),
                         T(lr), T(momentum), T(1 - dampening), T(wd)};
      if (momentum == 0) {
        sgd_kernel<T, false, false, false>(a);
      } else if (first) {
        nesterov ? sgd_kernel<T, true, true, true>(a) : sgd_kernel<T, true, true, false>(a);
      } else {
        nesterov ? sgd_kernel<T, true, false, true>(a) : sgd_kernel<T, true, false, false>(a);
      }
    });
  }

  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& max_exp_avg_sq,
                 const AdamStepArgs& args) override {
    dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
      using T = typename decltype(tag)::type;
      cpu::adam_step(param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(),
                     args.amsgrad ? max_exp_avg_sq.data<T>() : nullptr, param.numel(), args);
    });
  }

  // Not reached by rand() on the host, which keeps generator.h's stream; the reference for the GPU's.
  void uniform(Tensor& out, double low, double high, uint64_t seed, uint64_t counter) override {
    dispatch_floating(out.dtype(), "uniform", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = out.data<T>();
      const T lo = static_cast<T>(low), w = static_cast<T>(high - low);
      for (int64_t i = 0, n = out.numel(); i < n; ++i)
        p[i] = lo + w * detail::philox_uniform<T>(seed, counter + static_cast<uint64_t>(i));
    });
  }

 private:
  cpu::BlockCache cache_;  // large freed blocks, reused (tensor/cpu/block_cache.h)
};

// Registered before main(); //tensor:cpu is alwayslink so this survives static linking.
const bool registered = [] {
  // Never destroyed: tensors in static storage may free their blocks into it at exit.
  static CpuBackend* cpu = new CpuBackend;
  register_backend(DeviceType::CPU, cpu);
  return true;
}();

}  // namespace
}  // namespace lockstep
