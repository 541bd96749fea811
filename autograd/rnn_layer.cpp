// All time steps of one LSTM or GRU layer and direction as ONE differentiable op: one node per layer
// and direction instead of one (or a dozen) per step. The forward and backward recurrences are the ops
// layer's (tensor/rnn.cpp); the node keeps the states and gate activations they leave behind.
#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
namespace in = internal;

Tensor lstm_layer(const Tensor& x_gates, const Tensor& h0, const Tensor& c0, const Tensor& w_hh, bool reverse) {
  in::LSTMLayerResult r = in::lstm_layer(x_gates, h0, c0, w_hh, reverse);
  if (!any_requires_grad(x_gates, h0, c0, w_hh)) return r.hc;
  const bool want_w = w_hh.requires_grad();
  return record("lstm_layer", r.hc, {x_gates, h0, c0, w_hh},
                [hc = r.hc, gates = r.gates, w_hh = w_hh.detach(), reverse, want_w](const Tensor& grad) {
                  in::LSTMLayerGrads g = in::lstm_layer_backward(grad, hc, gates, w_hh, reverse, want_w);
                  return Grads{g.x_gates, g.h0, g.c0, g.w_hh};
                },
                autograd::Output::Saved);  // hc, the output
}

Tensor gru_layer(const Tensor& x_gates, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh, bool reverse) {
  in::GRULayerResult r = in::gru_layer(x_gates, h0, w_hh, b_hh, reverse);
  if (!any_requires_grad(x_gates, h0, w_hh, b_hh)) return r.h;
  const bool want_w = w_hh.requires_grad(), want_b = b_hh.defined() && b_hh.requires_grad();
  return record("gru_layer", r.h, {x_gates, h0, w_hh, b_hh},
                [h = r.h, gates = r.gates, h_gates = r.h_gates, w_hh = w_hh.detach(), reverse, want_w,
                 want_b](const Tensor& grad) {
                  in::GRULayerGrads g =
                      in::gru_layer_backward(grad, h, gates, h_gates, w_hh, reverse, want_w, want_b);
                  return Grads{g.x_gates, g.h0, g.w_hh, g.b_hh};
                },
                autograd::Output::Saved);  // h, the output
}

}  // namespace lockstep
