// The LSTM and GRU cells' elementwise rules for one (row, unit) element, forward and backward, shared
// by the CPU loops (cpu/rnn_cells.cpp) and the CUDA kernels (cuda/rnn_cells.cu), as optim_step.h is
// for the optimizer steps. Gate order is PyTorch's: i, f, g, o for LSTM; r, z, n for GRU.
#pragma once

#include <type_traits>

#include "tensor/elementwise_ops.h"
#include "tensor/host_device.h"

namespace lockstep::detail {

// Forced inline: the CPU loops are compiled per ISA (tensor/cpu/isa.h) and GCC otherwise keeps these
// as calls to the baseline copy, so the loop does not vectorise (the LSTM cell ran 4x slower).
#ifdef __CUDACC__
#define LOCKSTEP_RNN_INLINE __forceinline__
#else
#define LOCKSTEP_RNN_INLINE inline __attribute__((always_inline))
#endif

// sigmoid without a branch (a select the loops vectorise): exp of -|x| only, so it never overflows.
template <typename T>
LOCKSTEP_HOST_DEVICE LOCKSTEP_RNN_INLINE T rnn_sigmoid(T x) {
  const T e = math::exp(x < T(0) ? x : -x);
  const T s = T(1) / (T(1) + e);
  return x < T(0) ? e * s : s;
}

// tanh(x) = 2 sigmoid(2x) - 1 in float32: the sigmoid vectorises on the CPU where tanhf is a libm call
// per element; within a few float32 ulps of tanh in absolute terms. float64 keeps tanh's accuracy.
template <typename T>
LOCKSTEP_HOST_DEVICE LOCKSTEP_RNN_INLINE T rnn_tanh(T x) {
  if constexpr (std::is_same_v<T, float>)
    return T(2) * rnn_sigmoid(T(2) * x) - T(1);
  else
    return math::tanh(x);
}

// i, f, g, o: pre-activations in, activations out (kept for the backward); c = f c_prev + i g,
// h = o tanh(c).
template <typename T>
LOCKSTEP_HOST_DEVICE LOCKSTEP_RNN_INLINE void lstm_cell_forward(T& i, T& f, T& g, T& o, T c_prev, T& c, T& h) {
  i = rnn_sigmoid(i);
  f = rnn_sigmoid(f);
  g = rnn_tanh(g);
  o = rnn_sigmoid(o);
  c = f * c_prev + i * g;
  h = o * rnn_tanh(c);
}

// From the activations, c_prev, c and the gradients dh, dc of h and c: the pre-activations'
// gradients and c_prev's (through c = f c_prev + i g only; dc is the total gradient reaching c
// from outside this step).
template <typename T>
LOCKSTEP_HOST_DEVICE LOCKSTEP_RNN_INLINE void lstm_cell_backward(T i, T f, T g, T o, T c_prev, T c, T dh, T dc, T& di,
                                                                 T& df, T& dg, T& d_o, T& dc_prev) {
  const T tc = rnn_tanh(c);
  const T dct = dc + dh * o * (T(1) - tc * tc);  // everything reaching c
  di = dct * g * i * (T(1) - i);
  df = dct * c_prev * f * (T(1) - f);
  dg = dct * i * (T(1) - g * g);
  d_o = dh * tc * o * (T(1) - o);
  dc_prev = dct * f;
}

// xr, xz, xn from x W_ih^T + b_ih; hr, hz, hn from h_prev W_hh^T + b_hh. r, z, n are returned (kept for
// the backward); h = (1 - z) n + z h_prev with n = tanh(xn + r hn).
template <typename T>
LOCKSTEP_HOST_DEVICE LOCKSTEP_RNN_INLINE void gru_cell_forward(T xr, T xz, T xn, T hr, T hz, T hn, T h_prev, T& r, T& z,
                                                               T& n, T& h) {
  r = rnn_sigmoid(xr + hr);
  z = rnn_sigmoid(xz + hz);
  n = rnn_tanh(xn + r * hn);
  h = n + z * (h_prev - n);
}

// From r, z, n, hn, h_prev and dh: the gradients of the input-side pre-activations (dxr, dxz, dxn), of
// the hidden-side ones (dr and dz as dxr and dxz; dhn = dxn * r) and h_prev's through z (dh z).
template <typename T>
LOCKSTEP_HOST_DEVICE LOCKSTEP_RNN_INLINE void gru_cell_backward(T r, T z, T n, T hn, T h_prev, T dh, T& dr, T& dz,
                                                                T& dn, T& dhn, T& dh_prev) {
  dn = dh * (T(1) - z) * (T(1) - n * n);
  dz = dh * (h_prev - n) * z * (T(1) - z);
  dr = dn * hn * r * (T(1) - r);
  dhn = dn * r;
  dh_prev = dh * z;
}

}  // namespace lockstep::detail
