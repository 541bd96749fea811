// The gate steps of LSTM and GRU cells as single differentiable ops: the elementwise work of one time
// step after the matrix products, with a backward that reuses the saved gate activations instead of
// recording a dozen small nodes per step. Composed from the ops layer's elementwise rows.
#include "autograd/autograd_util.h"
#include "autograd/functions.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
namespace in = internal;

namespace {

Tensor sigmoid_(const Tensor& a) { return in::unary(UnaryOp::Sigmoid, a); }
// tanh(a) = 2 sigmoid(2a) - 1: the CPU's sigmoid row is vectorised, its tanh calls libm per element
// (a quarter of an LSTM step's time). Within a few float32 ulps of tanh in absolute terms.
Tensor tanh_(const Tensor& a) { return in::add(in::mul(sigmoid_(in::mul(a, 2.0)), 2.0), -1.0); }
// Gate k of n along the last dimension of x [B, n*H].
Tensor gate(const Tensor& x, int64_t k, int64_t h) { return in::narrow(x, 1, k * h, h); }

}  // namespace

// gates [B, 4H] (i, f, g, o pre-activations), c [B, H] -> [B, 2H] = (h', c').
Tensor lstm_gates(const Tensor& gates, const Tensor& c) {
  LOCKSTEP_CHECK(gates.defined() && c.defined() && gates.dim() == 2 && c.dim() == 2 &&
                     gates.size(0) == c.size(0) && gates.size(1) == 4 * c.size(1),
                 "lstm_gates: expected gates [B, 4H] and c [B, H], got ", gates.defined() ? gates.shape() : Shape{},
                 " and ", c.defined() ? c.shape() : Shape{});
  const int64_t h = c.size(1);
  Tensor i = sigmoid_(gate(gates, 0, h)), f = sigmoid_(gate(gates, 1, h)), g = tanh_(gate(gates, 2, h)),
         o = sigmoid_(gate(gates, 3, h));
  Tensor c2 = in::add(in::mul(f, c), in::mul(i, g));  // c' = f c + i g
  Tensor tc = tanh_(c2);
  Tensor out = in::cat({in::mul(o, tc), c2}, 1);  // h' = o tanh(c')
  if (!any_requires_grad(gates, c)) return out;
  return record("lstm_gates", out, {gates, c}, [i, f, g, o, tc, c = c.detach(), h](const Tensor& grad) {
    Tensor gh = gate(grad, 0, h), gc = gate(grad, 1, h);
    Tensor dc = in::add(gc, in::binary(BinaryOp::TanhBackward, in::mul(gh, o), tc));  // total dL/dc'
    Tensor di = in::binary(BinaryOp::SigmoidBackward, in::mul(dc, g), i);
    Tensor df = in::binary(BinaryOp::SigmoidBackward, in::mul(dc, c), f);
    Tensor dg = in::binary(BinaryOp::TanhBackward, in::mul(dc, i), g);
    Tensor d_o = in::binary(BinaryOp::SigmoidBackward, in::mul(gh, tc), o);
    return Grads{in::cat({di, df, dg, d_o}, 1), in::mul(dc, f)};
  });
}

// gi = x W_ih^T + b_ih [B, 3H], gh = h W_hh^T + b_hh [B, 3H] (r, z, n), h [B, H] -> h' [B, H].
Tensor gru_gates(const Tensor& gi, const Tensor& gh, const Tensor& h) {
  LOCKSTEP_CHECK(gi.defined() && gh.defined() && h.defined() && gi.dim() == 2 && h.dim() == 2 &&
                     gi.shape() == gh.shape() && gi.size(0) == h.size(0) && gi.size(1) == 3 * h.size(1),
                 "gru_gates: expected gi and gh [B, 3H] and h [B, H], got ", gi.defined() ? gi.shape() : Shape{},
                 ", ", gh.defined() ? gh.shape() : Shape{}, " and ", h.defined() ? h.shape() : Shape{});
  const int64_t n_h = h.size(1);
  Tensor r = sigmoid_(in::add(gate(gi, 0, n_h), gate(gh, 0, n_h)));
  Tensor z = sigmoid_(in::add(gate(gi, 1, n_h), gate(gh, 1, n_h)));
  Tensor hn = in::contiguous(gate(gh, 2, n_h));
  Tensor n = tanh_(in::add(gate(gi, 2, n_h), in::mul(r, hn)));
  Tensor out = in::add(n, in::mul(z, in::sub(h, n)));  // h' = (1 - z) n + z h
  if (!any_requires_grad(gi, gh, h)) return out;
  return record("gru_gates", out, {gi, gh, h}, [r, z, n, hn, h = h.detach()](const Tensor& g) {
    Tensor dn = in::binary(BinaryOp::TanhBackward, in::sub(g, in::mul(g, z)), n);  // through tanh
    Tensor dz = in::binary(BinaryOp::SigmoidBackward, in::mul(g, in::sub(h, n)), z);
    Tensor dr = in::binary(BinaryOp::SigmoidBackward, in::mul(dn, hn), r);
    return Grads{in::cat({dr, dz, dn}, 1), in::cat({dr, dz, in::mul(dn, r)}, 1), in::mul(g, z)};
  });
}

}  // namespace lockstep
