// Recurrent layers, as torch.nn.RNN, LSTM and GRU and their one-step cells RNNCell, LSTMCell and
// GRUCell, with LibTorch's options, forward signatures, parameter names and shapes (weight_ih_l0,
// weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse; gates i, f, g, o for LSTM and r, z, n for GRU) and
// initialisation (every parameter uniform in ±1/sqrt(hidden_size)), so state dicts move both ways:
//   nn::LSTM lstm(nn::LSTMOptions(128, 256).num_layers(2).batch_first(true).dropout(0.1));
//   auto [out, state] = lstm(x);                 // x [B, T, 128] -> out [B, T, 256]
//   auto [h_n, c_n] = state;                     // [2, B, 256] each
//   auto [out2, h_n2] = gru(x, h0);              // GRU and RNN: (output, h_n)
// Input is [T, B, in] ([B, T, in] with batch_first) or unbatched [T, in]; the state is
// [num_layers * num_directions, B, hidden] ([.., hidden] unbatched), zeros when not given.
// forward_with_packed_input takes a PackedSequence (nn/utils/rnn.h) and returns one, with h_n (c_n)
// each sequence's state after its own last step (the reverse direction starts there), in the
// original batch order, as PyTorch's.
//
// Per layer and direction, the input projection of all time steps is one matrix product
// ([T*B, in] @ W_ih^T + b_ih); LSTM and GRU then run all steps as one op (lstm_layer / gru_layer,
// autograd/rnn_layer.cpp: per step h @ W_hh^T and a fused cell kernel, and a backward that takes
// W_hh's gradient in one product over all steps); RNN and the cells add h @ W_hh^T + b_hh per step
// and run one gate op (autograd/rnn_cell.cpp).
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "nn/module.h"
#include "nn/module_holder.h"
#include "nn/options.h"
#include "nn/utils/rnn.h"

namespace lockstep::nn {

#define LOCKSTEP_RNN_OPTIONS(Name, ...)                                                                     \
  struct Name {                                                                                            \
    Name(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {} \
    LOCKSTEP_ARG(int64_t, input_size, 0);                                                                  \
    LOCKSTEP_ARG(int64_t, hidden_size, 0);                                                                 \
    LOCKSTEP_ARG(int64_t, num_layers, 1);                                                                  \
    LOCKSTEP_ARG(bool, bias, true);                                                                        \
    LOCKSTEP_ARG(bool, batch_first, false);                                                                \
    LOCKSTEP_ARG(double, dropout, 0.0); /* between layers, in training */                                  \
    LOCKSTEP_ARG(bool, bidirectional, false);                                                              \
    __VA_ARGS__                                                                                            \
  }

// nonlinearity: "tanh" (the default) or "relu".
LOCKSTEP_RNN_OPTIONS(RNNOptions, LOCKSTEP_ARG(std::string, nonlinearity, "tanh"););
LOCKSTEP_RNN_OPTIONS(LSTMOptions);
LOCKSTEP_RNN_OPTIONS(GRUOptions);

#define LOCKSTEP_RNN_CELL_OPTIONS(Name, ...)                                                                \
  struct Name {                                                                                            \
    Name(int64_t input_size, int64_t hidden_size) : input_size_(input_size), hidden_size_(hidden_size) {} \
    LOCKSTEP_ARG(int64_t, input_size, 0);                                                                  \
    LOCKSTEP_ARG(int64_t, hidden_size, 0);                                                                 \
    LOCKSTEP_ARG(bool, bias, true);                                                                        \
    __VA_ARGS__                                                                                            \
  }

LOCKSTEP_RNN_CELL_OPTIONS(RNNCellOptions, LOCKSTEP_ARG(std::string, nonlinearity, "tanh"););
LOCKSTEP_RNN_CELL_OPTIONS(LSTMCellOptions);
LOCKSTEP_RNN_CELL_OPTIONS(GRUCellOptions);

#undef LOCKSTEP_RNN_OPTIONS
#undef LOCKSTEP_RNN_CELL_OPTIONS

namespace detail {

enum class RNNMode { Tanh, Relu, LSTM, GRU };

// What RNN, LSTM and GRU share: the parameters of every layer and direction and the loop over time.
class RNNImplBase : public Module {
 public:
  // Every parameter uniform in ±1/sqrt(hidden_size), drawn from the default generator.
  void reset_parameters();
  // Parameters in PyTorch's order: per layer, per direction, weight_ih, weight_hh, bias_ih, bias_hh.
  std::vector<Tensor> all_weights() const { return parameters(); }
  // A no-op kept for LibTorch programs (cuDNN's packed weights do not exist here).
  void flatten_parameters() {}

  int64_t input_size, hidden_size, num_layers;
  bool bias, batch_first, bidirectional;
  double dropout;

 protected:
  RNNImplBase(const char* name, RNNMode mode, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
              bool batch_first, double dropout, bool bidirectional);
  // (output, h_n, c_n); c0 and c_n only for LSTM. hx / cx undefined: zeros.
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& hx, const Tensor& cx);
  // The same over a PackedSequence; hx / cx in the original batch order.
  std::tuple<utils::rnn::PackedSequence, Tensor, Tensor> run_packed(const utils::rnn::PackedSequence& input,
                                                                    const Tensor& hx, const Tensor& cx);

 private:
  RNNMode mode_;
  const char* name_;
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh;
  };
  std::vector<Weights> weights_;  // [layer * directions + direction]
  // run's layers over `weights` (weights_, or their autocast casts) in the input's dtype. With
  // `lengths` (packed input) the input is [T, B, in] padded, the batch sorted by decreasing length.
  std::tuple<Tensor, Tensor, Tensor> run_layers(const Tensor& input, const Tensor& hx, const Tensor& cx,
                                                const std::vector<Weights>& weights,
                                                const std::vector<int64_t>* lengths = nullptr);
  std::tuple<Tensor, Tensor, Tensor> run_any(const Tensor& input, const Tensor& hx, const Tensor& cx,
                                             const std::vector<int64_t>* lengths);
};

// What the cells share: weight_ih [G*H, in], weight_hh [G*H, H], bias_ih, bias_hh [G*H].
class RNNCellImplBase : public Module {
 public:
  void reset_parameters();

  int64_t input_size, hidden_size;
  bool bias;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RNNCellImplBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias);
  // input [B, in] or [in]; state [B, H] or [H] (undefined: zeros). Returns input and state as [B, ..]
  // and whether the input was unbatched.
  bool prepare(Tensor& input, Tensor& state, const char* state_name) const;
};

}  // namespace detail

class RNNImpl : public detail::RNNImplBase {
 public:
  explicit RNNImpl(const RNNOptions& options);
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  // (output [T, B, D*H], h_n [L*D, B, H]).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                           const Tensor& hx = {});
  RNNOptions options;
};
LOCKSTEP_MODULE(RNN);

class LSTMImpl : public detail::RNNImplBase {
 public:
  explicit LSTMImpl(const LSTMOptions& options);
  LSTMImpl(int64_t input_size, int64_t hidden_size) : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  // (output [T, B, D*H], (h_n, c_n) [L*D, B, H]).
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         std::optional<std::tuple<Tensor, Tensor>> hx = {});
  std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> forward_with_packed_input(
      const utils::rnn::PackedSequence& input, std::optional<std::tuple<Tensor, Tensor>> hx = {});
  LSTMOptions options;
};
LOCKSTEP_MODULE(LSTM);

class GRUImpl : public detail::RNNImplBase {
 public:
  explicit GRUImpl(const GRUOptions& options);
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = {});
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                           const Tensor& hx = {});
  GRUOptions options;
};
LOCKSTEP_MODULE(GRU);

// h' = tanh (or relu) of x W_ih^T + b_ih + h W_hh^T + b_hh; input [B, in] or [in] -> h' [B, H] or [H].
class RNNCellImpl : public detail::RNNCellImplBase {
 public:
  explicit RNNCellImpl(const RNNCellOptions& options);
  RNNCellImpl(int64_t input_size, int64_t hidden_size) : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  RNNCellOptions options;
};
LOCKSTEP_MODULE(RNNCell);

// (h', c') from input and (h, c).
class LSTMCellImpl : public detail::RNNCellImplBase {
 public:
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  LSTMCellImpl(int64_t input_size, int64_t hidden_size) : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(const Tensor& input, std::optional<std::tuple<Tensor, Tensor>> hx = {});
  LSTMCellOptions options;
};
LOCKSTEP_MODULE(LSTMCell);

class GRUCellImpl : public detail::RNNCellImplBase {
 public:
  explicit GRUCellImpl(const GRUCellOptions& options);
  GRUCellImpl(int64_t input_size, int64_t hidden_size) : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  GRUCellOptions options;
};
LOCKSTEP_MODULE(GRUCell);

}  // namespace lockstep::nn
