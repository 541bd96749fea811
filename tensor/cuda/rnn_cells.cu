// The LSTM and GRU cells on CUDA devices (tensor/backend.h's lstm_cell, gru_cell and their
// backwards): one thread per (row, unit) element, each by tensor/rnn_cell_ops.h's rule, the one the CPU
// loops run. One launch per step and direction; the products around them are cuBLAS's.
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/launch.cuh"
#include "tensor/rnn_cell_ops.h"
#include "tensor/tensor.h"

namespace lockstep::cuda::detail {
namespace {

// Element e of [rows, n]: row e / n, unit e % n; gate k of that row is at row * G * n + k * n + unit.
template <typename T>
__global__ void lstm_cell_kernel(T* gates, T* h, T* c, const T* x_gates, const T* c_prev, int64_t rows, int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, rows * n) {
    const int64_t r = e / n, j = e % n, b = r * 4 * n + j;
    T i = gates[b] + x_gates[b], f = gates[b + n] + x_gates[b + n], g = gates[b + 2 * n] + x_gates[b + 2 * n],
      o = gates[b + 3 * n] + x_gates[b + 3 * n], cv, hv;
    lockstep::detail::lstm_cell_forward(i, f, g, o, c_prev[e], cv, hv);
    gates[b] = i;
    gates[b + n] = f;
    gates[b + 2 * n] = g;
    gates[b + 3 * n] = o;
    c[e] = cv;
    h[e] = hv;
  }
}

template <typename T>
__global__ void lstm_cell_backward_kernel(T* d_gates, T* d_c_prev, const T* gates, const T* c_prev, const T* c,
                                          const T* d_h, const T* d_c, int64_t rows, int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, rows * n) {
    const int64_t r = e / n, j = e % n, b = r * 4 * n + j;
    T di, df, dg, d_o, dcp;
    lockstep::detail::lstm_cell_backward(gates[b], gates[b + n], gates[b + 2 * n], gates[b + 3 * n], c_prev[e], c[e],
                                         d_h[e], d_c[e], di, df, dg, d_o, dcp);
    d_gates[b] = di;
    d_gates[b + n] = df;
    d_gates[b + 2 * n] = dg;
    d_gates[b + 3 * n] = d_o;
    d_c_prev[e] += dcp;
  }
}

template <typename T>
__global__ void gru_cell_kernel(T* gates, T* h, const T* x_gates, const T* h_gates, const T* h_prev, int64_t rows,
                                int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, rows * n) {
    const int64_t r = e / n, j = e % n, b = r * 3 * n + j;
    T rv, zv, nv, hv;
    lockstep::detail::gru_cell_forward(x_gates[b], x_gates[b + n], x_gates[b + 2 * n], h_gates[b], h_gates[b + n],
                                       h_gates[b + 2 * n], h_prev[e], rv, zv, nv, hv);
    gates[b] = rv;
    gates[b + n] = zv;
    gates[b + 2 * n] = nv;
    h[e] = hv;
  }
}

template <typename T>
__global__ void gru_cell_backward_kernel(T* d_x_gates, T* d_h_gates, T* d_h_prev, const T* gates, const T* h_gates,
                                         const T* h_prev, const T* d_h, int64_t rows, int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, rows * n) {
    const int64_t r = e / n, j = e % n, b = r * 3 * n + j;
    T dr, dz, dn, dhn, dhp;
    lockstep::detail::gru_cell_backward(gates[b], gates[b + n], gates[b + 2 * n], h_gates[b + 2 * n], h_prev[e],
                                        d_h[e], dr, dz, dn, dhn, dhp);
    d_x_gates[b] = dr;
    d_x_gates[b + n] = dz;
    d_x_gates[b + 2 * n] = dn;
    d_h_gates[b] = dr;
    d_h_gates[b + n] = dz;
    d_h_gates[b + 2 * n] = dhn;
    d_h_prev[e] += dhp;
  }
}

}  // namespace

void CudaBackend::lstm_cell(Tensor& gates, Tensor& h, Tensor& c, const Tensor& x_gates, const Tensor& c_prev,
                            int64_t rows, int64_t n) {
  OnDevice on(gates.device());
  if (rows * n == 0) return;
  dispatch_floating(gates.dtype(), "lstm_cell", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("lstm_cell_kernel", lstm_cell_kernel<T>, grid_for(rows * n, on.ctx), kThreads, on.stream(),
                    gates.data<T>(), h.data<T>(), c.data<T>(), x_gates.data<T>(), c_prev.data<T>(), rows, n);
  });
}

void CudaBackend::lstm_cell_backward(Tensor& d_gates, Tensor& d_c_prev, const Tensor& gates, const Tensor& c_prev,
                                     const Tensor& c, const Tensor& d_h, const Tensor& d_c, int64_t rows, int64_t n) {
  OnDevice on(gates.device());
  if (rows * n == 0) return;
  dispatch_floating(gates.dtype(), "lstm_cell_backward", [&](auto tag) {
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
  dispatch_floating(gates.dtype(), "gru_cell", [&](auto tag) {
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
  dispatch_floating(gates.dtype(), "gru_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    LOCKSTEP_LAUNCH("gru_cell_backward_kernel", gru_cell_backward_kernel<T>, grid_for(rows * n, on.ctx), kThreads,
                    on.stream(), d_x_gates.data<T>(), d_h_gates.data<T>(), d_h_prev.data<T>(), gates.data<T>(),
                    h_gates.data<T>(), h_prev.data<T>(), d_h.data<T>(), rows, n);
  });
}

}  // namespace lockstep::cuda::detail
