// Recurrent layers and cells (nn/rnn.h): the loop over layers, directions and time steps.
#include "nn/rnn.h"

#include <cmath>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "nn/init.h"
#include "tensor/factory.h"

namespace lockstep::nn {
namespace detail {

namespace {

int64_t gate_count(RNNMode mode) { return mode == RNNMode::LSTM ? 4 : mode == RNNMode::GRU ? 3 : 1; }

Shape shape_of(const Tensor& t) { return t.defined() ? t.shape() : Shape{}; }

// One step of a cell: input projection xp [B, G*H] (x W_ih^T + b_ih), state h (and c for LSTM) -> new
// state in place.
void step(RNNMode mode, const Tensor& xp, Tensor& h, Tensor& c, const Tensor& w_hh, const Tensor& b_hh) {
  Tensor hp = linear(h, w_hh, b_hh);  // [B, G*H]
  switch (mode) {
    case RNNMode::Tanh: h = tanh(xp + hp); break;
    case RNNMode::Relu: h = relu(xp + hp); break;
    case RNNMode::GRU: h = gru_gates(xp, hp, h); break;
    case RNNMode::LSTM: {
      const int64_t n = h.size(1);
      Tensor hc = lstm_gates(xp + hp, c);  // [B, 2H]: h', c'
      h = narrow(hc, 1, 0, n);
      c = narrow(hc, 1, n, n);
      break;
    }
  }
}

// One step of a cell (RNNCell, LSTMCell, GRUCell) on a prepared input and state, as PyTorch's autocast
// lists the cells (autocast.cpp): where they are lowered (CUDA) the input and the states are cast, and
// every op of the step then runs in the autocast dtype; where they are not (the CPU) nothing is, so
// only the products (linear) run in bfloat16 and the gates follow type promotion with the float32
// states: LSTMCell and GRUCell return float32, RNNCell bfloat16, as PyTorch's do.
void cell_step(RNNMode mode, const RNNCellImplBase& m, const Tensor& x, Tensor& h, Tensor& c) {
  using autograd::amp::cast_input;
  const auto op = autograd::amp::AutocastOp::RNNCell;
  h = cast_input(op, h);
  c = cast_input(op, c);
  step(mode, linear(cast_input(op, x), m.weight_ih, m.bias_ih), h, c, m.weight_hh, m.bias_hh);
}

// Packed input, run padded: states [R, B, H] -> [B, H], row lengths[b] + shift of column b (the state
// after each sequence's own last step).
Tensor at_lengths(const Tensor& states, const std::vector<int64_t>& lengths, int64_t shift) {
  const int64_t R = states.size(0), B = states.size(1);
  std::vector<int64_t> idx(B);
  for (int64_t b = 0; b < B; ++b) idx[b] = (lengths[b] + shift) * B + b;
  Tensor index = tensor(idx, {B}).to(states.device());
  return index_select(reshape(states, {R * B, states.size(2)}), 0, index);
}

// x [T, B, F] with each column's first lengths[b] steps in reverse order (the rest kept): the reverse
// direction of a packed sequence runs forward over this, and the same gather puts its outputs back.
Tensor reverse_within_lengths(const Tensor& x, const std::vector<int64_t>& lengths) {
  const int64_t T = x.size(0), B = x.size(1);
  std::vector<int64_t> idx(T * B);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) idx[t * B + b] = (t < lengths[b] ? lengths[b] - 1 - t : t) * B + b;
  Tensor index = tensor(idx, {T * B}).to(x.device());
  return view(index_select(reshape(x, {T * B, x.size(2)}), 0, index), x.shape());
}

RNNMode rnn_mode(const std::string& nonlinearity, const char* name) {
  LOCKSTEP_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", name,
                 ": nonlinearity must be \"tanh\" or \"relu\", got \"", nonlinearity, "\"");
  return nonlinearity == "tanh" ? RNNMode::Tanh : RNNMode::Relu;
}

}  // namespace

RNNImplBase::RNNImplBase(const char* name, RNNMode mode, int64_t in, int64_t hidden, int64_t layers, bool bias_,
                         bool batch_first_, double dropout_, bool bidirectional_)
    : Module(name), input_size(in), hidden_size(hidden), num_layers(layers), bias(bias_), batch_first(batch_first_),
      bidirectional(bidirectional_), dropout(dropout_), mode_(mode), name_(name) {
  LOCKSTEP_CHECK(in > 0 && hidden > 0 && layers > 0, name, ": input_size, hidden_size and num_layers must be positive, got ",
                 in, ", ", hidden, " and ", layers);
  LOCKSTEP_CHECK(dropout_ >= 0 && dropout_ <= 1, name, ": dropout must be in [0, 1], got ", dropout_);
  const int64_t g = gate_count(mode) * hidden, dirs = bidirectional ? 2 : 1;
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      Weights w;
      w.w_ih = register_parameter("weight_ih" + sfx, empty({g, l == 0 ? in : hidden * dirs}));
      w.w_hh = register_parameter("weight_hh" + sfx, empty({g, hidden}));
      if (bias) {
        w.b_ih = register_parameter("bias_ih" + sfx, empty({g}));
        w.b_hh = register_parameter("bias_hh" + sfx, empty({g}));
      }
      weights_.push_back(w);
    }
  }
  reset_parameters();
}

void RNNImplBase::reset_parameters() {
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (Tensor& p : parameters()) init::uniform_(p, -k, k);
}

std::tuple<Tensor, Tensor, Tensor> RNNImplBase::run(const Tensor& input, const Tensor& hx, const Tensor& cx) {
  return run_any(input, hx, cx, nullptr);
}

std::tuple<utils::rnn::PackedSequence, Tensor, Tensor> RNNImplBase::run_packed(const utils::rnn::PackedSequence& input,
                                                                               const Tensor& hx, const Tensor& cx) {
  namespace packing = utils::rnn::detail;
  const Tensor& data = input.data();
  LOCKSTEP_CHECK(data.defined() && data.dim() == 2, name_, ": expected packed data [N, ", input_size, "], got ",
                 shape_of(data));
  const std::vector<int64_t> lengths = packing::lengths_of(input.batch_sizes());
  const int64_t T = input.batch_sizes().size(0), B = static_cast<int64_t>(lengths.size());
  const Shape state{num_layers * (bidirectional ? 2 : 1), B, hidden_size};
  // The states come in the original batch order; the packed columns are sorted by length.
  auto sorted = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return s;
    LOCKSTEP_CHECK(s.shape() == state, name_, ": expected ", what, " of shape ", state, " for a PackedSequence of ", B,
                   " sequences, got ", s.shape());
    return input.sorted_indices().defined() ? index_select(s, 1, input.sorted_indices()) : s;
  };
  auto unsorted = [&](const Tensor& s) {
    return s.defined() && input.unsorted_indices().defined() ? index_select(s, 1, input.unsorted_indices()) : s;
  };
  Tensor x = packing::packed_to_padded(data, input.batch_sizes(), 0.0, T);  // [T, B, in], sorted
  Tensor h0 = sorted(hx, "h0"), c0 = sorted(cx, "c0");  // checked in this order
  auto [out, h, c] = run_any(x, h0, c0, &lengths);
  utils::rnn::PackedSequence packed(packing::padded_to_packed(out, input.batch_sizes()), input.batch_sizes(),
                                    input.sorted_indices(), input.unsorted_indices());
  return {packed, unsorted(h), unsorted(c)};
}

std::tuple<Tensor, Tensor, Tensor> RNNImplBase::run_any(const Tensor& input, const Tensor& hx, const Tensor& cx,
                                                        const std::vector<int64_t>* lengths) {
  if (!autograd::amp::any_enabled) return run_layers(input, hx, cx, weights_, lengths);
  // Under autocast the layer runs as its row of the autocast table says (amp::run_layer): one op in one
  // dtype, or PyTorch's composite.
  using autograd::amp::AutocastOp;
  const AutocastOp op = mode_ == RNNMode::LSTM ? AutocastOp::LSTM : mode_ == RNNMode::GRU ? AutocastOp::GRU
                                                                                         : AutocastOp::RNN;
  std::vector<Tensor> operands{input, hx, cx};
  for (const Weights& w : weights_) operands.insert(operands.end(), {w.w_ih, w.w_hh, w.b_ih, w.b_hh});
  return autograd::amp::run_layer(op, weights_[0].w_ih.device().type, std::move(operands),
                                  [&](const std::vector<Tensor>& t) {
    std::vector<Weights> ws;
    for (size_t i = 3; i + 3 < t.size(); i += 4) ws.push_back({t[i], t[i + 1], t[i + 2], t[i + 3]});
    return run_layers(t[0], t[1], t[2], ws, lengths);
  });
}

std::tuple<Tensor, Tensor, Tensor> RNNImplBase::run_layers(const Tensor& input, const Tensor& hx, const Tensor& cx,
                                                           const std::vector<Weights>& weights,
                                                           const std::vector<int64_t>* lengths) {
  const int64_t dirs = bidirectional ? 2 : 1, H = hidden_size;
  const Tensor& w0 = weights[0].w_ih;
  LOCKSTEP_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3), name_, ": expected a 2-D (unbatched) or 3-D input, got ",
                 shape_of(input));
  LOCKSTEP_CHECK(input.size(-1) == input_size, name_, "(", input_size, ", ", hidden_size, "): expected input [",
                 input.dim() == 2 ? "T" : batch_first ? "B, T" : "T, B", ", ", input_size, "], got ", input.shape());
  LOCKSTEP_CHECK(input.dtype() == w0.dtype(), name_, ": expected a ", w0.dtype(), " input, got ", input.dtype());
  LOCKSTEP_CHECK(input.device() == w0.device(), name_, ": input on ", input.device(), " but the layer on ", w0.device(),
                 " (move one with .to(device))");
  const bool unbatched = input.dim() == 2 && !lengths;
  // x: [T, B, in] (packed input comes so)
  Tensor x = unbatched ? unsqueeze(input, 1) : batch_first && !lengths ? transpose(input, 0, 1) : input;
  const int64_t T = x.size(0), B = x.size(1);
  const Shape state = unbatched ? Shape{num_layers * dirs, H} : Shape{num_layers * dirs, B, H};
  auto initial = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return zeros({num_layers * dirs, B, H}, TensorOptions(w0.dtype(), w0.device()));
    LOCKSTEP_CHECK(s.shape() == state, name_, ": expected ", what, " of shape ", state, " for input ", input.shape(),
                   ", got ", s.shape());
    LOCKSTEP_CHECK(s.dtype() == w0.dtype() && s.device() == w0.device(), name_, ": ", what, " is ", s.dtype(), " on ",
                   s.device(), " but the layer is ", w0.dtype(), " on ", w0.device());
    return unbatched ? unsqueeze(s, 1) : s;
  };
  Tensor h0 = initial(hx, "h0"), c0 = mode_ == RNNMode::LSTM ? initial(cx, "c0") : Tensor();

  // LSTM and GRU run each layer and direction as one op (autograd/rnn_layer.cpp), in every floating
  // dtype on every device; RNN step by step.
  const bool fused = (mode_ == RNNMode::LSTM || mode_ == RNNMode::GRU) && T > 0;
  std::vector<Tensor> h_n, c_n;
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const Weights& w = weights[l * dirs + d];
      const int64_t G = w.w_ih.size(0);
      // LSTM and RNN add b_hh outside any gate, so it joins b_ih in the one product below and the
      // steps run without a bias; GRU's b_hn sits inside r * (h W_hn^T + b_hn) and stays per step.
      const bool fold = mode_ != RNNMode::GRU && w.b_ih.defined();
      // xp: [T, B, G*H], all time steps' input projections in one product.
      Tensor xp = view(linear(reshape(x, {T * B, x.size(2)}), w.w_ih, fold ? w.b_ih + w.b_hh : w.b_ih), {T, B, G});
      Tensor h = select(h0, 0, l * dirs + d), c = c0.defined() ? select(c0, 0, l * dirs + d) : Tensor();
      // Packed, the reverse direction runs forward over each sequence reversed within its length.
      const bool reverse = d == 1 && !lengths, reversed = d == 1 && lengths;
      if (reversed) xp = reverse_within_lengths(xp, *lengths);
      if (fused) {
        // One op for all T steps: states in position order, h0 at row 0 (row T in reverse), so the
        // outputs are rows [1, T] ([0, T)) and h_n is row T (row 0).
        const bool lstm = mode_ == RNNMode::LSTM;
        Tensor hc = lstm ? lstm_layer(xp, h, c, w.w_hh, reverse) : gru_layer(xp, h, w.w_hh, w.b_hh, reverse);
        Tensor hs = lstm ? select(hc, 0, 0) : hc;  // LSTM: [2, T + 1, B, H], the h rows then the c rows
        Tensor out = narrow(hs, 0, reverse ? 0 : 1, T);
        outs.push_back(reversed ? reverse_within_lengths(out, *lengths) : out);
        h_n.push_back(lengths ? at_lengths(hs, *lengths, 0) : select(hs, 0, reverse ? 0 : T));
        if (lstm) {
          Tensor cs = select(hc, 0, 1);
          c_n.push_back(lengths ? at_lengths(cs, *lengths, 0) : select(cs, 0, reverse ? 0 : T));
        }
        continue;
      }
      // Only RNN gets here with packed input (T > 0), so there is no c to pick at the lengths.
      std::vector<Tensor> hs(T);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = reverse ? T - 1 - i : i;
        step(mode_, select(xp, 0, t), h, c, w.w_hh, fold ? Tensor() : w.b_hh);
        hs[t] = h;
      }
      Tensor out = stack(hs, 0);  // [T, B, H]
      outs.push_back(reversed ? reverse_within_lengths(out, *lengths) : out);
      h_n.push_back(lengths ? at_lengths(out, *lengths, -1) : h);
      if (c.defined()) c_n.push_back(c);
    }
    x = dirs == 2 ? cat(outs, 2) : outs[0];  // [T, B, D*H]
    if (dropout > 0 && is_training() && l + 1 < num_layers) x = lockstep::dropout(x, dropout, true);
  }
  Tensor out = unbatched ? squeeze(x, 1) : batch_first && !lengths ? transpose(x, 0, 1) : x;
  Tensor hn = stack(h_n, 0), cn = c_n.empty() ? Tensor() : stack(c_n, 0);
  if (unbatched) {
    hn = squeeze(hn, 1);
    if (cn.defined()) cn = squeeze(cn, 1);
  }
  return {out, hn, cn};
}

RNNCellImplBase::RNNCellImplBase(const char* name, int64_t gates, int64_t in, int64_t hidden, bool bias_)
    : Module(name), input_size(in), hidden_size(hidden), bias(bias_) {
  LOCKSTEP_CHECK(in > 0 && hidden > 0, name, ": input_size and hidden_size must be positive, got ", in, " and ", hidden);
  weight_ih = register_parameter("weight_ih", empty({gates * hidden, in}));
  weight_hh = register_parameter("weight_hh", empty({gates * hidden, hidden}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", empty({gates * hidden}));
    bias_hh = register_parameter("bias_hh", empty({gates * hidden}));
  }
  reset_parameters();
}

void RNNCellImplBase::reset_parameters() {
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (Tensor& p : parameters()) init::uniform_(p, -k, k);
}

bool RNNCellImplBase::prepare(Tensor& x, Tensor& s, const char* what) const {
  LOCKSTEP_CHECK(x.defined() && (x.dim() == 1 || x.dim() == 2) && x.size(-1) == input_size, name(), "(", input_size,
                 ", ", hidden_size, "): expected input [B, ", input_size, "] or [", input_size, "], got ", shape_of(x));
  LOCKSTEP_CHECK(x.dtype() == weight_ih.dtype() && x.device() == weight_ih.device(), name(), ": input is ", x.dtype(),
                 " on ", x.device(), " but the cell is ", weight_ih.dtype(), " on ", weight_ih.device());
  const bool unbatched = x.dim() == 1;
  if (unbatched) x = unsqueeze(x, 0);
  const Shape want = unbatched ? Shape{hidden_size} : Shape{x.size(0), hidden_size};
  if (!s.defined()) {
    s = zeros({x.size(0), hidden_size}, TensorOptions(x.dtype(), x.device()));
  } else {
    LOCKSTEP_CHECK(s.shape() == want, name(), ": expected ", what, " of shape ", want, " for input ",
                   unbatched ? Shape{input_size} : x.shape(), ", got ", s.shape());
    LOCKSTEP_CHECK(s.dtype() == x.dtype() && s.device() == x.device(), name(), ": ", what, " is ", s.dtype(), " on ",
                   s.device(), " but the input is ", x.dtype(), " on ", x.device());
    if (unbatched) s = unsqueeze(s, 0);
  }
  return unbatched;
}

}  // namespace detail

using detail::RNNMode;

RNNImpl::RNNImpl(const RNNOptions& o)
    : RNNImplBase("RNN", detail::rnn_mode(o.nonlinearity(), "RNN"), o.input_size(), o.hidden_size(), o.num_layers(),
                  o.bias(), o.batch_first(), o.dropout(), o.bidirectional()),
      options(o) {}

std::tuple<Tensor, Tensor> RNNImpl::forward(const Tensor& input, const Tensor& hx) {
  auto [out, h, c] = run(input, hx, Tensor());
  return {out, h};
}

std::tuple<utils::rnn::PackedSequence, Tensor> RNNImpl::forward_with_packed_input(
    const utils::rnn::PackedSequence& input, const Tensor& hx) {
  auto [out, h, c] = run_packed(input, hx, Tensor());
  return {out, h};
}

LSTMImpl::LSTMImpl(const LSTMOptions& o)
    : RNNImplBase("LSTM", RNNMode::LSTM, o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(),
                  o.dropout(), o.bidirectional()),
      options(o) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTMImpl::forward(const Tensor& input,
                                                                 std::optional<std::tuple<Tensor, Tensor>> hx) {
  Tensor h0, c0;
  if (hx) std::tie(h0, c0) = *hx;
  LOCKSTEP_CHECK(h0.defined() == c0.defined(), "LSTM: give both h0 and c0, or neither");
  auto [out, h, c] = run(input, h0, c0);
  return {out, {h, c}};
}

std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> LSTMImpl::forward_with_packed_input(
    const utils::rnn::PackedSequence& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
  Tensor h0, c0;
  if (hx) std::tie(h0, c0) = *hx;
  LOCKSTEP_CHECK(h0.defined() == c0.defined(), "LSTM: give both h0 and c0, or neither");
  auto [out, h, c] = run_packed(input, h0, c0);
  return {out, {h, c}};
}

GRUImpl::GRUImpl(const GRUOptions& o)
    : RNNImplBase("GRU", RNNMode::GRU, o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(),
                  o.dropout(), o.bidirectional()),
      options(o) {}

std::tuple<Tensor, Tensor> GRUImpl::forward(const Tensor& input, const Tensor& hx) {
  auto [out, h, c] = run(input, hx, Tensor());
  return {out, h};
}

std::tuple<utils::rnn::PackedSequence, Tensor> GRUImpl::forward_with_packed_input(
    const utils::rnn::PackedSequence& input, const Tensor& hx) {
  auto [out, h, c] = run_packed(input, hx, Tensor());
  return {out, h};
}

RNNCellImpl::RNNCellImpl(const RNNCellOptions& o)
    : RNNCellImplBase("RNNCell", 1, o.input_size(), o.hidden_size(), o.bias()), options(o) {
  detail::rnn_mode(o.nonlinearity(), "RNNCell");
}

Tensor RNNCellImpl::forward(const Tensor& input, const Tensor& hx) {
  Tensor x = input, h = hx, c;
  bool unbatched = prepare(x, h, "hx");
  detail::cell_step(detail::rnn_mode(options.nonlinearity(), "RNNCell"), *this, x, h, c);
  return unbatched ? squeeze(h, 0) : h;
}

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& o)
    : RNNCellImplBase("LSTMCell", 4, o.input_size(), o.hidden_size(), o.bias()), options(o) {}

std::tuple<Tensor, Tensor> LSTMCellImpl::forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx) {
  Tensor x = input, h, c;
  if (hx) std::tie(h, c) = *hx;
  LOCKSTEP_CHECK(h.defined() == c.defined(), "LSTMCell: give both h and c, or neither");
  Tensor x2 = x;
  bool unbatched = prepare(x, h, "h");
  prepare(x2, c, "c");
  detail::cell_step(RNNMode::LSTM, *this, x, h, c);
  if (unbatched) return {squeeze(h, 0), squeeze(c, 0)};
  return {h, c};
}

GRUCellImpl::GRUCellImpl(const GRUCellOptions& o)
    : RNNCellImplBase("GRUCell", 3, o.input_size(), o.hidden_size(), o.bias()), options(o) {}

Tensor GRUCellImpl::forward(const Tensor& input, const Tensor& hx) {
  Tensor x = input, h = hx, c;
  bool unbatched = prepare(x, h, "hx");
  detail::cell_step(RNNMode::GRU, *this, x, h, c);
  return unbatched ? squeeze(h, 0) : h;
}

}  // namespace lockstep::nn
