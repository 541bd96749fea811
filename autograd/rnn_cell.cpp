// The gate steps of LSTM and GRU cells (nn::LSTMCell, nn::GRUCell) as single differentiable ops: one
// time step of the fused layers' cell kernels (Backend::lstm_cell, gru_cell and their backward, by
// tensor/rnn_cell_ops.h's rules), so a cell and a whole layer compute each step by the same rule, in
// float32 registers whatever the storage dtype. The node keeps the gate activations the forward leaves.
#include <array>

#include "autograd/autograd_util.h"
#include "autograd/functions.h"
#include "tensor/backend.h"
#include "tensor/factory.h"

namespace lockstep {

using autograd::any_requires_grad;
using autograd::Grads;
using autograd::record;
namespace in = internal;

namespace {

// Operands in their promoted dtype (a bfloat16 product beside float32 states under CPU autocast is
// computed in float32, as type promotion has it), contiguous, as the cell kernels take them.
Tensor as(const Tensor& t, Dtype dtype) { return in::contiguous(in::to_dtype(t, dtype)); }
Tensor zeros_as(const Shape& shape, const Tensor& like) {
  return zeros(shape, TensorOptions(like.dtype(), like.device()));
}

}  // namespace

// gates [B, 4H] (i, f, g, o pre-activations), c [B, H] -> [B, 2H] = (h', c').
Tensor lstm_gates(const Tensor& gates_in, const Tensor& c_in) {
  LOCKSTEP_CHECK(gates_in.defined() && c_in.defined() && gates_in.dim() == 2 && c_in.dim() == 2 &&
                     gates_in.size(0) == c_in.size(0) && gates_in.size(1) == 4 * c_in.size(1),
                 "lstm_gates: expected gates [B, 4H] and c [B, H], got ",
                 gates_in.defined() ? gates_in.shape() : Shape{}, " and ", c_in.defined() ? c_in.shape() : Shape{});
  in::check_same_device(gates_in, c_in, "lstm_gates");
  const Dtype dt = promote_types(gates_in.dtype(), c_in.dtype());
  const Tensor x_gates = as(gates_in, dt), c = as(c_in, dt);
  const int64_t B = c.size(0), H = c.size(1);
  // The kernel adds x_gates onto what `act` holds (a layer's h_prev W_hh^T; here the cell's products are
  // in x_gates already) and leaves the activations there.
  Tensor act = zeros_as({B, 4 * H}, c), h2({B, H}, dt, c.device()), c2({B, H}, dt, c.device());
  if (B > 0) backend_for(c.device()).lstm_cell(act, h2, c2, x_gates, c, B, H);
  Tensor out = in::cat({h2, c2}, 1);
  if (!any_requires_grad(gates_in, c_in)) return out;
  return record("lstm_gates", out, {gates_in, c_in},
                [act, c, c2, H, gd = gates_in.dtype(), cd = c_in.dtype()](const Tensor& grad) {
                  const int64_t B = c.size(0);
                  const Tensor dh = as(in::narrow(grad, 1, 0, H), c.dtype());
                  const Tensor dc = as(in::narrow(grad, 1, H, H), c.dtype());
                  Tensor d_gates(act.shape(), act.dtype(), act.device()), d_c = zeros_as(c.shape(), c);
                  if (B > 0) backend_for(c.device()).lstm_cell_backward(d_gates, d_c, act, c, c2, dh, dc, B, H);
                  return Grads{in::to_dtype(d_gates, gd), in::to_dtype(d_c, cd)};
                });
}

// gi = x W_ih^T + b_ih [B, 3H], gh = h W_hh^T + b_hh [B, 3H] (r, z, n), h [B, H] -> h' [B, H].
Tensor gru_gates(const Tensor& gi_in, const Tensor& gh_in, const Tensor& h_in) {
  LOCKSTEP_CHECK(gi_in.defined() && gh_in.defined() && h_in.defined() && gi_in.dim() == 2 && h_in.dim() == 2 &&
                     gi_in.shape() == gh_in.shape() && gi_in.size(0) == h_in.size(0) &&
                     gi_in.size(1) == 3 * h_in.size(1),
                 "gru_gates: expected gi and gh [B, 3H] and h [B, H], got ", gi_in.defined() ? gi_in.shape() : Shape{},
                 ", ", gh_in.defined() ? gh_in.shape() : Shape{}, " and ", h_in.defined() ? h_in.shape() : Shape{});
  in::check_same_device(gi_in, h_in, "gru_gates");
  in::check_same_device(gh_in, h_in, "gru_gates");
  const Dtype dt = promote_types(promote_types(gi_in.dtype(), gh_in.dtype()), h_in.dtype());
  const Tensor gi = as(gi_in, dt), gh = as(gh_in, dt), h = as(h_in, dt);
  const int64_t B = h.size(0), H = h.size(1);
  Tensor act({B, 3 * H}, dt, h.device()), out({B, H}, dt, h.device());
  if (B > 0) backend_for(h.device()).gru_cell(act, out, gi, gh, h, B, H);
  if (!any_requires_grad(gi_in, gh_in, h_in)) return out;
  return record("gru_gates", out, {gi_in, gh_in, h_in},
                [act, gh, h, dts = std::array<Dtype, 3>{gi_in.dtype(), gh_in.dtype(), h_in.dtype()}](const Tensor& g) {
                  const int64_t B = h.size(0), H = h.size(1);
                  Tensor d_gi(act.shape(), act.dtype(), act.device()), d_gh(act.shape(), act.dtype(), act.device());
                  Tensor d_h = zeros_as(h.shape(), h);  // the kernel adds the path through z into it
                  if (B > 0)
                    backend_for(h.device()).gru_cell_backward(d_gi, d_gh, d_h, act, gh, h, as(g, h.dtype()), B, H);
                  return Grads{in::to_dtype(d_gi, dts[0]), in::to_dtype(d_gh, dts[1]), in::to_dtype(d_h, dts[2])};
                });
}

}  // namespace lockstep
