// RNNModel: model.py's RNNModel (see model.h).
#include "examples/word_lm/model.h"

namespace lockstep::examples {

RNNModelImpl::RNNModelImpl(const RNNModelConfig& c) : Module("RNNModel"), config(c) {
  const std::string& t = c.rnn_type;
  LOCKSTEP_CHECK(t == "LSTM" || t == "GRU" || t == "RNN_TANH" || t == "RNN_RELU", "RNNModel: rnn_type must be "
                 "LSTM, GRU, RNN_TANH or RNN_RELU, got '", t, "'");
  LOCKSTEP_CHECK(c.ntoken >= 1 && c.ninp >= 1 && c.nhid >= 1 && c.nlayers >= 1, "RNNModel: ntoken, ninp, nhid "
                 "and nlayers must be positive, got ", c.ntoken, ", ", c.ninp, ", ", c.nhid, ", ", c.nlayers);
  LOCKSTEP_CHECK(!c.tie_weights || c.nhid == c.ninp, "RNNModel: when using the tied flag, nhid must be equal to "
                 "emsize, got nhid ", c.nhid, " and emsize ", c.ninp);
  drop = register_module("drop", nn::Dropout(c.dropout));
  encoder = register_module("encoder", nn::Embedding(c.ntoken, c.ninp));
  if (t == "LSTM")
    lstm = register_module("rnn", nn::LSTM(nn::LSTMOptions(c.ninp, c.nhid).num_layers(c.nlayers).dropout(c.dropout)));
  else if (t == "GRU")
    gru = register_module("rnn", nn::GRU(nn::GRUOptions(c.ninp, c.nhid).num_layers(c.nlayers).dropout(c.dropout)));
  else
    rnn = register_module("rnn", nn::RNN(nn::RNNOptions(c.ninp, c.nhid).num_layers(c.nlayers).dropout(c.dropout)
                                             .nonlinearity(t == "RNN_TANH" ? "tanh" : "relu")));
  decoder = register_module("decoder", nn::Linear(c.nhid, c.ntoken));
  // self.decoder.weight = self.encoder.weight: one tensor, yielded once by parameters().
  if (c.tie_weights) decoder->weight = decoder->register_parameter("weight", encoder->weight);

  NoGradGuard no_grad;
  const double initrange = 0.1;
  nn::init::uniform_(encoder->weight, -initrange, initrange);
  nn::init::zeros_(decoder->bias);
  nn::init::uniform_(decoder->weight, -initrange, initrange);
}

std::tuple<Tensor, Hidden> RNNModelImpl::forward(const Tensor& input, const Hidden& hidden) {
  LOCKSTEP_CHECK(input.dim() == 2 && input.dtype() == kInt64, "RNNModel::forward: input must be int64 [T, B], got ",
                 input.dtype(), " ", input.shape());
  LOCKSTEP_CHECK(hidden.h.defined() && hidden.c.defined() == !lstm.is_empty(), "RNNModel::forward: the ",
                 config.rnn_type, " needs ", lstm ? "(h, c)" : "h alone", " from init_hidden");
  Tensor emb = drop(encoder(input));  // [T, B, ninp]
  Tensor output;
  Hidden next;
  if (lstm) {
    auto [out, state] = lstm(emb, std::make_tuple(hidden.h, hidden.c));
    output = out, next.h = std::get<0>(state), next.c = std::get<1>(state);
  } else {
    std::tie(output, next.h) = gru ? gru(emb, hidden.h) : rnn(emb, hidden.h);
  }
  Tensor decoded = decoder(drop(output));  // [T, B, ntoken]
  return {nn::functional::log_softmax(decoded.view({-1, config.ntoken}), 1), next};
}

Hidden RNNModelImpl::init_hidden(int64_t bsz) const {
  const Tensor& weight = encoder->weight;
  Tensor h = weight.new_zeros({config.nlayers, bsz, config.nhid});
  return {h, lstm ? weight.new_zeros({config.nlayers, bsz, config.nhid}) : Tensor()};
}

}  // namespace lockstep::examples
