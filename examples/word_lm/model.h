// RNNModel: pytorch/examples word_language_model's model.py in lockstep, with its parameter names
// (encoder.weight, rnn.weight_ih_l0 ..., decoder.weight, decoder.bias), so a state_dict saved here loads
// into the PyTorch model and back. An Embedding encoder, dropout, a multi-layer LSTM, GRU or Elman RNN
// (dropout between its layers), dropout, a Linear decoder to the vocabulary, log-softmax; with `tied`
// the decoder's weight is the encoder's (Press & Wolf 2016; nhid must equal emsize).
//
//   RNNModel model(RNNModelConfig{.ntoken = 10000});
//   Hidden hidden = model->init_hidden(20);
//   auto [log_probs, next] = model(input, hidden);   // input int64 [T, B] -> log_probs [T * B, ntoken]
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include "nn/api.h"

namespace lockstep::examples {

struct RNNModelConfig {
  std::string rnn_type = "LSTM";  // LSTM, GRU, RNN_TANH or RNN_RELU
  int64_t ntoken = 0, ninp = 200, nhid = 200, nlayers = 2;
  double dropout = 0.2;
  bool tie_weights = false;
};

// The recurrent state: (h, c) for an LSTM, h alone (c undefined) for a GRU or RNN; [nlayers, B, nhid] each.
struct Hidden {
  Tensor h, c;
  // main.py's repackage_hidden: the same values, cut from the graph of the batches before.
  Hidden detach() const { return {h.detach(), c.defined() ? c.detach() : Tensor()}; }
};

class RNNModelImpl : public nn::Module {
 public:
  // model.py's init_weights: encoder and decoder weights uniform in ±0.1, decoder bias zero; the
  // recurrent layer keeps PyTorch's initialisation. Draws from the default generator (manual_seed).
  // Throws on an unknown rnn_type, ntoken < 1, or tie_weights with nhid != ninp, naming them.
  explicit RNNModelImpl(const RNNModelConfig& config);

  // input int64 [T, B]; returns log-probabilities [T * B, ntoken] and the state after the last step.
  std::tuple<Tensor, Hidden> forward(const Tensor& input, const Hidden& hidden);
  Hidden init_hidden(int64_t bsz) const;  // zeros on the parameters' device

  const RNNModelConfig config;
  nn::Dropout drop{nullptr};
  nn::Embedding encoder{nullptr};
  nn::LSTM lstm{nullptr};  // one of these three is registered, as "rnn"
  nn::GRU gru{nullptr};
  nn::RNN rnn{nullptr};
  nn::Linear decoder{nullptr};
};
LOCKSTEP_MODULE(RNNModel);

}  // namespace lockstep::examples
