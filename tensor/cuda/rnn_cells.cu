// The LSTM and GRU cells on CUDA devices (tensor/backend.h's lstm_cell, gru_cell and their
// backwards): one thread per (row, unit) element, each by tensor/rnn_cell_ops.h's rule, the one the CPU
// loops run. One launch per step and direction; the products around them are cuBLAS's. bfloat16 and
// float16 gates and states are loaded at 16 bits, computed in float32 (C = compute_t<T>) and stored at
// 16 bits, as PyTorch's fused cells and cuDNN do under autocast: the cell state c stays 16-bit too.
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/rnn_cell_ops.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// Element e of [rows, n]: row e / n, unit e % n; gate k of that row is at row * G * n + k * n + unit.
template <typename T, typename C = compute_t<T>>
__global__ void lstm_cell_kernel(T* gates, T* h, T* c, const T* x_gates, const T* c_prev, int64_t rows, int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, rows * n) {
    const int64_t r = e / n, j = e % n, b = r * 4 * n + j;
    C i = ld(gates[b]) + ld(x_gates[b]), f = ld(gates[b + n]) + ld(x_gates[b + n]),
      g = ld(gates[b + 2 * n]) + ld(x_gates[b + 2 * n]), o = ld(gates[b + 3 * n]) + ld(x_gates[b + 3 * n]), cv, hv;
    lockstep::detail::lstm_cell_forward(i, f, g, o, ld(c_prev[e]), cv, hv);
    gates[b] = static_cast<T>(i);
    gates[b + n] = static_cast<T>(f);
    gates[b + 2 * n] = static_cast<T>(g);
    gates[b + 3 * n] = static_cast<T>(o);
    c[e] = static_cast<T>(cv);
    h[e] = static_cast<T>(hv);
  }
}

template <typename T, typename C = compute_t<T>>
__global__ void lstm_cell_backward_kernel(T* d_gates, T* d_c_prev, const T* gates, const T* c_prev, const T* c,
                                          const T* d_h, const T* d_c, int64_t rows, int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, rows * n) {
    const int64_t r = e / n, j = e % n, b = r * 4 * n + j;
    C di, df, dg, d_o, dcp;
    lockstep::detail::lstm_cell_backward(ld(gates[b]), ld(gates[b + n]), ld(gates[b + 2 * n]), ld(gates[b + 3 * n]),
                                         ld(c_prev[e]), ld(c[e]), ld(d_h[e]), ld(d_c[e]), di, df, dg, d_o, dcp);
    d_gates[b] = static_cast<T>(di);
    d_gates[b + n] = static_cast<T>(df);
    d_gates[b + 2 * n] = static_cast<T>(dg);
    d_gates[b + 3 * n] = static_cast<T>(d_o);
    d_c_prev[e] = static_cast<T>(ld(d_c_prev[e]) + dcp);
  }
}

template <typename T, typename C = compute_t<T>>
__global__ void gru_cell_kernel(T* gates, T* h, const T* x_gates, const T* h_gates, const T* h_prev, int64_t rows,
                                int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, rows * n) {
    const int64_t r = e / n, j = e % n, b = r * 3 * n + j;
    C rv, zv, nv, hv;
    lockstep::detail::gru_cell_forward(ld(x_gates[b]), ld(x_gates[b + n]), ld(x_gates[b + 2 * n]), ld(h_gates[b]),
                                       ld(h_gates[b + n]), ld(h_gates[b + 2 * n]), ld(h_prev[e]), rv, zv, nv, hv);
    gates[b] = static_cast<T>(rv);
    gates[b + n] = static_cast<T>(zv);
    gates[b + 2 * n] = static_cast<T>(nv);
    h[e] = static_cast<T>(hv);
  }
}

template <typename T, typename C = compute_t<T>>
__global__ void gru_cell_backward_kernel(T* d_x_gates, T* d_h_gates, T* d_h_prev, const T* gates, const T* h_gates,
                                         const T* h_prev, const T* d_h, int64_t rows, int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, rows * n) {
    const int64_t r = e / n, j = e % n, b = r * 3 * n + j;
    C dr, dz, dn, dhn, dhp;
    lockstep::detail::gru_cell_backward(ld(gates[b]), ld(gates[b + n]), ld(gates[b + 2 * n]), ld(h_gates[b + 2 * n]),
                                        ld(h_prev[e]), ld(d_h[e]), dr, dz, dn, dhn, dhp);
    d_x_gates[b] = static_cast<T>(dr);
    d_x_gates[b + n] = static_cast<T>(dz);
    d_x_gates[b + 2 * n] = static_cast<T>(dn);
    d_h_gates[b] = static_cast<T>(dr);
    d_h_gates[b + n] = static_cast<T>(dz);
    d_h_gates[b + 2 * n] = static_cast<T>(dhn);
    d_h_prev[e] = static_cast<T>(ld(d_h_prev[e]) + dhp);
  }
}

}  // namespace

void CudaBackend::lstm_cell(Tensor& gates, Tensor& h, Tensor& c, const Tensor& x_gates, const Tensor& c_prev,
                            int64_t rows, int64_t n) {
  OnDevice on(gates.device());
  if (rows * n == 0) return;
  dispatch_any_floating(gates.dtype(), "lstm_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("lstm_cell_kernel", lstm_cell_kernel<T>, grid_for(rows * n, on.ctx), kThreads, on.stream(),
                    gates.data<T>(), h.data<T>(), c.data<T>(), x_gates.data<T>(), c_prev.data<T>(), rows, n);
  });
}

void CudaBackend::lstm_cell_backward(Tensor& d_gates, Tensor& d_c_prev, const Tensor& gates, const Tensor& c_prev,
                                     const Tensor& c, const Tensor& d_h, const Tensor& d_c, int64_t rows, int64_t n) {
  OnDevice on(gates.device());
  if (rows * n == 0) return;
  dispatch_any_floating(gates.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("lstm_cell_backward_kernel", lstm_cell_backward_kernel<T>, grid_for(rows * n, on.ctx), kThreads,
                    on.stream(), d_gates.data<T>(), d_c_prev.data<T>(), gates.data<T>(), c_prev.data<T>(),
                    c.data<T>(), d_h.data<T>(), d_c.data<T>(), rows, n);
  });
}

void CudaBackend::gru_cell(Tensor& gates, Tensor& h, const Tensor& x_gates, const Tensor& h_gates,
                           const Tensor& h_prev, int64_t rows, int64_t n) {
  OnDevice on(gates.device());
  if (rows * n == 0) return;
  dispatch_any_floating(gates.dtype(), "gru_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("gru_cell_kernel", gru_cell_kernel<T>, grid_for(rows * n, on.ctx), kThreads, on.stream(),
                    gates.data<T>(), h.data<T>(), x_gates.data<T>(), h_gates.data<T>(), h_prev.data<T>(), rows, n);
  });
}

void CudaBackend::gru_cell_backward(Tensor& d_x_gates, Tensor& d_h_gates, Tensor& d_h_prev, const Tensor& gates,
                                    const Tensor& h_gates, const Tensor& h_prev, const Tensor& d_h, int64_t rows,
                                    int64_t n) {
  OnDevice on(gates.device());
  if (rows * n == 0) return;
  dispatch_any_floating(gates.dtype(), "gru_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("gru_cell_backward_kernel", gru_cell_backward_kernel<T>, grid_for(rows * n, on.ctx), kThreads,
                    on.stream(), d_x_gates.data<T>(), d_h_gates.data<T>(), d_h_prev.data<T>(), gates.data<T>(),
                    h_gates.data<T>(), h_prev.data<T>(), d_h.data<T>(), rows, n);
  });
}

}  // namespace lockstep::cuda::detail
