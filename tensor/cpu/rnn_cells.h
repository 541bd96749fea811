// The CPU backend's LSTM and GRU cell loops (tensor/backend.h's lstm_cell, gru_cell and their
// backwards) over contiguous rows of n units: float, double, and BFloat16 and Float16 (computed in
// float32). Compiled for x86-64-v3 and for v4 (tensor/cpu/isa.h): call them through LOCKSTEP_CPU_ISA_CALL.
#pragma once

#include <cstdint>

#define LOCKSTEP_CPU_RNN_CELLS_DECL(isa)                                                                      \
  namespace lockstep::cpu::isa {                                                                              \
  template <typename T>                                                                                       \
  void lstm_cell_rows(T* gates, T* h, T* c, const T* x_gates, const T* c_prev, int64_t rows, int64_t n);       \
  template <typename T>                                                                                       \
  void lstm_cell_backward_rows(T* d_gates, T* d_c_prev, const T* gates, const T* c_prev, const T* c,          \
                               const T* d_h, const T* d_c, int64_t rows, int64_t n);                          \
  template <typename T>                                                                                       \
  void gru_cell_rows(T* gates, T* h, const T* x_gates, const T* h_gates, const T* h_prev, int64_t rows,        \
                     int64_t n);                                                                              \
  template <typename T>                                                                                       \
  void gru_cell_backward_rows(T* d_x_gates, T* d_h_gates, T* d_h_prev, const T* gates, const T* h_gates,      \
                              const T* h_prev, const T* d_h, int64_t rows, int64_t n);                        \
  }
LOCKSTEP_CPU_RNN_CELLS_DECL(avx2)
LOCKSTEP_CPU_RNN_CELLS_DECL(avx512)
#undef LOCKSTEP_CPU_RNN_CELLS_DECL
