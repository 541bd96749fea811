// The LSTM and GRU cell loops (tensor/cpu/rnn_cells.h), compiled once per ISA (tensor/cpu/isa.h):
// sigmoids and multiply-adds over a step's [rows, n] units, twice as wide with AVX-512. Each element
// follows tensor/rnn_cell_ops.h, the rule the CUDA kernels run too. The rows of one step are split
// across the intra-op threads only when there are enough of them to pay for it. bfloat16 and float16
// rows run the float32 loop over chunks converted to float32 (float_blocks.h) and round what they
// write once, as the elementwise rows do: no float32 copy of a whole step, let alone of the sequence.
// Every header is included before LOCKSTEP_ISA_BEGIN (isa.h says why).
#include "tensor/cpu/rnn_cells.h"

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tensor/cpu/float_blocks.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/rows.h"
#include "tensor/parallel.h"
#include "tensor/rnn_cell_ops.h"

LOCKSTEP_ISA_BEGIN
namespace {

int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kRowGrain / std::max<int64_t>(4 * n, 1)); }

// One row each. The gates of a row are separate __restrict parameters, and the functions are not
// inlined: GCC does not vectorise these loops through __restrict locals derived from one pointer
// ("complicated access pattern"), and a call per row costs nothing next to its n units.
template <typename T>
__attribute__((noinline)) void lstm_row(T* __restrict i_, T* __restrict f_, T* __restrict g_, T* __restrict o_,
                                        T* __restrict h, T* __restrict c, const T* __restrict xi,
                                        const T* __restrict xf, const T* __restrict xg, const T* __restrict xo,
                                        const T* __restrict c_prev, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    T i = i_[j] + xi[j], f = f_[j] + xf[j], g = g_[j] + xg[j], o = o_[j] + xo[j], cv, hv;
    lockstep::detail::lstm_cell_forward(i, f, g, o, c_prev[j], cv, hv);
    i_[j] = i;
    f_[j] = f;
    g_[j] = g;
    o_[j] = o;
    c[j] = cv;
    h[j] = hv;
  }
}

template <typename T>
__attribute__((noinline)) void lstm_backward_row(T* __restrict di, T* __restrict df, T* __restrict dg,
                                                 T* __restrict d_o, T* __restrict dc_prev, const T* __restrict i,
                                                 const T* __restrict f, const T* __restrict g, const T* __restrict o,
                                                 const T* __restrict c_prev, const T* __restrict c,
                                                 const T* __restrict dh, const T* __restrict dc, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    T a, b, e, q, dcp;
    lockstep::detail::lstm_cell_backward(i[j], f[j], g[j], o[j], c_prev[j], c[j], dh[j], dc[j], a, b, e, q, dcp);
    di[j] = a;
    df[j] = b;
    dg[j] = e;
    d_o[j] = q;
    dc_prev[j] += dcp;
  }
}

template <typename T>
__attribute__((noinline)) void gru_row(T* __restrict r_, T* __restrict z_, T* __restrict n_, T* __restrict h,
                                       const T* __restrict xr, const T* __restrict xz, const T* __restrict xn,
                                       const T* __restrict hr, const T* __restrict hz, const T* __restrict hn,
                                       const T* __restrict h_prev, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    T r, z, nv, hv;
    lockstep::detail::gru_cell_forward(xr[j], xz[j], xn[j], hr[j], hz[j], hn[j], h_prev[j], r, z, nv, hv);
    r_[j] = r;
    z_[j] = z;
    n_[j] = nv;
    h[j] = hv;
  }
}

template <typename T>
__attribute__((noinline)) void gru_backward_row(T* __restrict dxr, T* __restrict dxz, T* __restrict dxn,
                                                T* __restrict dhr, T* __restrict dhz, T* __restrict dhn,
                                                T* __restrict dh_prev, const T* __restrict r, const T* __restrict z,
                                                const T* __restrict nv, const T* __restrict hn,
                                                const T* __restrict h_prev, const T* __restrict dh, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    T a, b, e, q, dhp;
    lockstep::detail::gru_cell_backward(r[j], z[j], nv[j], hn[j], h_prev[j], dh[j], a, b, e, q, dhp);
    dxr[j] = a;
    dxz[j] = b;
    dxn[j] = e;
    dhr[j] = a;
    dhz[j] = b;
    dhn[j] = q;
    dh_prev[j] += dhp;
  }
}

// Units per chunk of a 16-bit row: at most 13 operands of 256 float32 (13 KiB) stay in L1.
constexpr int64_t kChunk = 256;

template <typename T>
constexpr bool kHalf = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

// row(p..., n), whose first NO pointers are its outputs. float and double run the row itself; bfloat16
// and float16 run its float32 instance over chunks of every operand converted to float32, then round
// the outputs back. The outputs in the mask kInOut are read first: the gates the product wrote there,
// the gradients a step adds into.
template <size_t NO, unsigned kInOut, typename Row, typename... P>
void run_row(Row row, int64_t n, P... p) {
  using T = std::remove_const_t<std::remove_pointer_t<std::tuple_element_t<0, std::tuple<P...>>>>;
  if constexpr (!kHalf<T>) {
    row(p..., n);
  } else {
    constexpr size_t N = sizeof...(P);
    constexpr Dtype dt = dtype_of<T>::value;
    const std::tuple<P...> ptr{p...};
    alignas(64) float buf[N][kChunk];
    for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
      const int64_t len = std::min(kChunk, n - j0);
      [&]<size_t... K>(std::index_sequence<K...>) {
        ((K >= NO || (kInOut >> K & 1u) ? load_floats(dt, std::get<K>(ptr) + j0, 1, len, buf[K]) : void()), ...);
        row(static_cast<std::conditional_t<(K < NO), float*, const float*>>(buf[K])..., len);
      }(std::make_index_sequence<N>{});
      [&]<size_t... K>(std::index_sequence<K...>) {
        (store_floats(dt, std::get<K>(ptr) + j0, 1, len, buf[K]), ...);
      }(std::make_index_sequence<NO>{});
    }
  }
}

}  // namespace

// Gate k of row r of a [rows, G * n] buffer starts at r * G * n + k * n.
template <typename T>
void lstm_cell_rows(T* gates, T* h, T* c, const T* x_gates, const T* c_prev, int64_t rows, int64_t n) {
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* g = gates + r * 4 * n;
      const T* x = x_gates + r * 4 * n;
      run_row<6, 0b1111>([](auto... a) { lstm_row(a...); }, n, g, g + n, g + 2 * n, g + 3 * n, h + r * n, c + r * n, x,
                         x + n, x + 2 * n, x + 3 * n, c_prev + r * n);
    }
  });
}

template <typename T>
void lstm_cell_backward_rows(T* d_gates, T* d_c_prev, const T* gates, const T* c_prev, const T* c, const T* d_h,
                             const T* d_c, int64_t rows, int64_t n) {
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* d = d_gates + r * 4 * n;
      const T* g = gates + r * 4 * n;
      const int64_t o = r * n;
      run_row<5, 0b10000>([](auto... a) { lstm_backward_row(a...); }, n, d, d + n, d + 2 * n, d + 3 * n, d_c_prev + o, g,
                          g + n, g + 2 * n, g + 3 * n, c_prev + o, c + o, d_h + o, d_c + o);
    }
  });
}

template <typename T>
void gru_cell_rows(T* gates, T* h, const T* x_gates, const T* h_gates, const T* h_prev, int64_t rows, int64_t n) {
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* g = gates + r * 3 * n;
      const T *x = x_gates + r * 3 * n, *hg = h_gates + r * 3 * n;
      run_row<4, 0>([](auto... a) { gru_row(a...); }, n, g, g + n, g + 2 * n, h + r * n, x, x + n, x + 2 * n, hg, hg + n,
                    hg + 2 * n, h_prev + r * n);
    }
  });
}

template <typename T>
void gru_cell_backward_rows(T* d_x_gates, T* d_h_gates, T* d_h_prev, const T* gates, const T* h_gates,
                            const T* h_prev, const T* d_h, int64_t rows, int64_t n) {
  parallel_for(0, rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T *dx = d_x_gates + r * 3 * n, *dhg = d_h_gates + r * 3 * n;
      const T* g = gates + r * 3 * n;
      run_row<7, 0b1000000>([](auto... a) { gru_backward_row(a...); }, n, dx, dx + n, dx + 2 * n, dhg, dhg + n,
                            dhg + 2 * n, d_h_prev + r * n, g, g + n, g + 2 * n, h_gates + r * 3 * n + 2 * n,
                            h_prev + r * n, d_h + r * n);
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                                 \
  template void lstm_cell_rows<T>(T*, T*, T*, const T*, const T*, int64_t, int64_t);                            \
  template void lstm_cell_backward_rows<T>(T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t,     \
                                           int64_t);                                                            \
  template void gru_cell_rows<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t);                        \
  template void gru_cell_backward_rows<T>(T*, T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
LOCKSTEP_INSTANTIATE(BFloat16)
LOCKSTEP_INSTANTIATE(Float16)
#undef LOCKSTEP_INSTANTIATE

LOCKSTEP_ISA_END
