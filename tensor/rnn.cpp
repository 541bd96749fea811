// Recurrent layers in the ops layer: every time step of one LSTM or GRU layer and direction, forward
// and backward, as one product per step (h_prev W_hh^T) and the backend's fused cell kernel, into
// buffers allocated once per layer. The backward runs the steps in reverse, keeps every step's gate
// gradients and then takes W_hh's gradient as ONE product over all steps, as cuDNN and PyTorch's CPU
// path do, instead of a small product per step. Every buffer is of x_gates' dtype: a 16-bit layer keeps
// its states (the cell state too), gates and gradients at 16 bits, with no float32 copy: cuDNN's under
// autocast on CUDA, and on the CPU what PyTorch's mkldnn_rnn_layer returns under autocast (h and c in
// bfloat16). The cells compute in float32; the products accumulate in float32 (the CPU's bfloat16 GEMM,
// tensor/cpu/gemm.h; float16 on the CPU, which has no float16 GEMM, through float32 copies of a step).
#include "tensor/ops.h"

namespace lockstep::internal {

namespace {

// Step i of T in the order the steps run: position t, the row of the state it reads (p) and of the
// state it writes (q) in a [T + 1, ...] state buffer (ops.h's layout).
struct StepRows {
  int64_t t, p, q;
};
StepRows step_rows(int64_t i, int64_t T, bool reverse) {
  const int64_t t = reverse ? T - 1 - i : i;
  return reverse ? StepRows{t, t + 1, t} : StepRows{t, t, t + 1};
}

// The checks lstm_layer and gru_layer share; returns x_gates contiguous.
Tensor check_layer(const char* op, const Tensor& x_gates, const Tensor& h0, const Tensor& w_hh, int64_t gates) {
  check_defined(x_gates, op);
  check_defined(h0, op);
  check_defined(w_hh, op);
  // bfloat16 and float16: the cells compute in float32 and keep 16-bit states on every device.
  const Dtype dt = x_gates.dtype();
  LOCKSTEP_CHECK(dt == kFloat32 || dt == kFloat64 || dt == kBFloat16 || dt == kFloat16, op,
                 ": expected float32, float64, bfloat16 or float16 tensors, got ", dt, " on ", x_gates.device());
  LOCKSTEP_CHECK(h0.dim() == 2 && x_gates.dim() == 3 && x_gates.size(0) > 0 && x_gates.size(1) == h0.size(0) &&
                     x_gates.size(2) == gates * h0.size(1) && w_hh.shape() == Shape({gates * h0.size(1), h0.size(1)}),
                 op, ": expected x_gates [T > 0, B, ", gates, "H], h0 [B, H] and w_hh [", gates, "H, H], got ",
                 x_gates.shape(), ", ", h0.shape(), " and ", w_hh.shape());
  for (const Tensor* t : {&h0, &w_hh}) {
    check_same_device(x_gates, *t, op);
    LOCKSTEP_CHECK(t->dtype() == x_gates.dtype(), op, ": dtypes differ: ", x_gates.dtype(), " and ", t->dtype());
  }
  return contiguous(x_gates);
}

}  // namespace

LSTMLayerResult lstm_layer(const Tensor& x_gates_in, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                           bool reverse) {
  Tensor x_gates = check_layer("lstm_layer", x_gates_in, h0, w_hh, 4);
  check_defined(c0, "lstm_layer");
  LOCKSTEP_CHECK(c0.shape() == h0.shape() && c0.dtype() == h0.dtype() && c0.device() == h0.device(),
                 "lstm_layer: c0 ", c0.shape(), " ", c0.dtype(), " on ", c0.device(), " does not match h0 ", h0.shape(),
                 " ", h0.dtype(), " on ", h0.device());
  const int64_t T = x_gates.size(0), B = h0.size(0), H = h0.size(1);
  const Device dev = x_gates.device();
  LSTMLayerResult r{Tensor({2, T + 1, B, H}, x_gates.dtype(), dev), Tensor({T, B, 4 * H}, x_gates.dtype(), dev)};
  Tensor hs = select(r.hc, 0, 0), cs = select(r.hc, 0, 1);  // [T + 1, B, H] each
  Tensor h_init = select(hs, 0, reverse ? T : 0), c_init = select(cs, 0, reverse ? T : 0);
  copy_(h_init, h0);
  copy_(c_init, c0);
  Backend& be = backend_for(dev);
  const Tensor w_t = contiguous(transpose(w_hh));  // [H, 4H]: transposed once, not packed so at every step
  for (int64_t i = 0; i < T; ++i) {
    const auto [t, p, q] = step_rows(i, T, reverse);
    Tensor g = select(r.gates, 0, t), h = select(hs, 0, q), c = select(cs, 0, q);
    gemm_(g, select(hs, 0, p), false, w_t, false, 1, 0);  // g = h_prev W_hh^T
    be.lstm_cell(g, h, c, select(x_gates, 0, t), select(cs, 0, p), B, H);
  }
  return r;
}

LSTMLayerGrads lstm_layer_backward(const Tensor& grad_hc, const Tensor& hc, const Tensor& gates, const Tensor& w_hh,
                                   bool reverse, bool want_w_hh) {
  LOCKSTEP_CHECK(grad_hc.shape() == hc.shape() && hc.dim() == 4 && gates.dim() == 3,
                 "lstm_layer_backward: gradient ", grad_hc.shape(), " does not match the states ", hc.shape());
  const int64_t T = gates.size(0), B = gates.size(1), H = hc.size(3);
  // d: [2, T + 1, B, H], the gradients reaching each h and c from outside; the steps add what flows
  // back through the recurrence into the rows they read.
  Tensor d = clone(to_dtype(grad_hc, hc.dtype()));
  Tensor dh = select(d, 0, 0), dc = select(d, 0, 1), hs = select(hc, 0, 0), cs = select(hc, 0, 1);
  Tensor d_gates(gates.shape(), gates.dtype(), gates.device());
  Backend& be = backend_for(gates.device());
  for (int64_t i = T - 1; i >= 0; --i) {
    const auto [t, p, q] = step_rows(i, T, reverse);
    Tensor dg = select(d_gates, 0, t), dh_p = select(dh, 0, p), dc_p = select(dc, 0, p);
    be.lstm_cell_backward(dg, dc_p, select(gates, 0, t), select(cs, 0, p), select(cs, 0, q), select(dh, 0, q),
                          select(dc, 0, q), B, H);
    gemm_(dh_p, dg, false, w_hh, false, 1, 1);  // dh_prev += dg W_hh
  }
  LSTMLayerGrads g{d_gates, select(dh, 0, reverse ? T : 0), select(dc, 0, reverse ? T : 0), Tensor()};
  if (want_w_hh) {
    // dW_hh [4H, H] = sum over steps of dg_t^T h_prev(t): one product over the T * B rows. The states
    // the steps read are rows [0, T) of hs ([1, T] in reverse), in position order as d_gates.
    Tensor h_prev = reshape(narrow(hs, 0, reverse ? 1 : 0, T), {T * B, H});
    g.w_hh = matmul(reshape(d_gates, {T * B, 4 * H}), h_prev, true, false);
  }
  return g;
}

GRULayerResult gru_layer(const Tensor& x_gates_in, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh,
                         bool reverse) {
  Tensor x_gates = check_layer("gru_layer", x_gates_in, h0, w_hh, 3);
  const int64_t T = x_gates.size(0), B = h0.size(0), H = h0.size(1);
  if (b_hh.defined()) {
    LOCKSTEP_CHECK(b_hh.shape() == Shape({3 * H}) && b_hh.dtype() == x_gates.dtype() && b_hh.device() == h0.device(),
                   "gru_layer: expected b_hh [", 3 * H, "] ", x_gates.dtype(), " on ", h0.device(), ", got ",
                   b_hh.shape(), " ", b_hh.dtype(), " on ", b_hh.device());
  }
  const Device dev = x_gates.device();
  GRULayerResult r{Tensor({T + 1, B, H}, x_gates.dtype(), dev), Tensor({T, B, 3 * H}, x_gates.dtype(), dev),
                   Tensor({T, B, 3 * H}, x_gates.dtype(), dev)};
  Tensor h_init = select(r.h, 0, reverse ? T : 0);
  copy_(h_init, h0);
  Backend& be = backend_for(dev);
  const Tensor w_t = contiguous(transpose(w_hh));  // [H, 3H], as in lstm_layer
  for (int64_t i = 0; i < T; ++i) {
    const auto [t, p, q] = step_rows(i, T, reverse);
    Tensor g = select(r.gates, 0, t), hg = select(r.h_gates, 0, t), h = select(r.h, 0, q), h_prev = select(r.h, 0, p);
    gemm_(hg, h_prev, false, w_t, false, 1, 0, b_hh);  // hg = h_prev W_hh^T + b_hh
    be.gru_cell(g, h, select(x_gates, 0, t), hg, h_prev, B, H);
  }
  return r;
}

GRULayerGrads gru_layer_backward(const Tensor& grad_h, const Tensor& h, const Tensor& gates, const Tensor& h_gates,
                                 const Tensor& w_hh, bool reverse, bool want_w_hh, bool want_b_hh) {
  LOCKSTEP_CHECK(grad_h.shape() == h.shape() && h.dim() == 3 && gates.dim() == 3, "gru_layer_backward: gradient ",
                 grad_h.shape(), " does not match the states ", h.shape());
  const int64_t T = gates.size(0), B = gates.size(1), H = h.size(2);
  Tensor dh = clone(to_dtype(grad_h, h.dtype()));  // [T + 1, B, H], as in lstm_layer_backward
  Tensor d_x_gates(gates.shape(), gates.dtype(), gates.device());
  Tensor d_h_gates(gates.shape(), gates.dtype(), gates.device());
  Backend& be = backend_for(gates.device());
  for (int64_t i = T - 1; i >= 0; --i) {
    const auto [t, p, q] = step_rows(i, T, reverse);
    Tensor dx = select(d_x_gates, 0, t), dhg = select(d_h_gates, 0, t), dh_p = select(dh, 0, p);
    be.gru_cell_backward(dx, dhg, dh_p, select(gates, 0, t), select(h_gates, 0, t), select(h, 0, p), select(dh, 0, q),
                         B, H);
    gemm_(dh_p, dhg, false, w_hh, false, 1, 1);  // dh_prev += dhg W_hh
  }
  GRULayerGrads g{d_x_gates, select(dh, 0, reverse ? T : 0), Tensor(), Tensor()};
  Tensor dhg2 = reshape(d_h_gates, {T * B, 3 * H});
  if (want_w_hh) g.w_hh = matmul(dhg2, reshape(narrow(h, 0, reverse ? 1 : 0, T), {T * B, H}), true, false);
  if (want_b_hh) g.b_hh = sum(dhg2, 0);
  return g;
}

}  // namespace lockstep::internal
