// examples/word_lm against data.py's rules, model.py's names and PyTorch's losses, on CPU ranks over loopback:
//  - Corpus: words and "<eos>" per line, the dictionary in order of first appearance over train, valid,
//    test, the split by "%"-ended documents, batchify's columns and get_batch's windows, by hand;
//  - RNNModel: model.py's parameter names (tied and not), shapes, the GRU's state, bad configurations;
//  - parity: the first 20 step losses of a small LSTM, and of a GRU with tied weights, over 3 epochs (an lr
//    anneal among them) and the validation losses equal PyTorch's (tests/fixtures/word_lm_parity.json and
//    word_lm_gru_tied_parity.json, written by tools/fixtures/make_word_lm_fixture.sh with
//    tools/twins/word_lm_twin.py from the same initial weights) to 1e-4 relative, on 1 rank at batch 4 and
//    on 2 ranks at batch 2 (2 columns each).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "distributed/init.h"
#include "examples/word_lm/corpus.h"
#include "examples/word_lm/train.h"
#include "tests/util/multiprocess.h"
#include "tests/util/tcp_group.h"

using namespace lockstep;
using namespace lockstep::examples;

namespace {

std::vector<int64_t> ints(const Tensor& t) { return t.contiguous().to_vector<int64_t>(); }

struct Fixture {
  WordLMOptions options;  // global batch in options.train.batch_size
  std::vector<double> losses, val_losses;
};

Fixture load_fixture(const std::string& name) {
  std::ifstream in("tests/fixtures/" + name);
  REQUIRE(in.good());
  auto j = nlohmann::json::parse(in);
  const auto& c = j.at("config");
  Fixture f;
  WordLMOptions& o = f.options;
  o.text = c.at("text").get<std::string>();
  o.model.rnn_type = c.at("model").get<std::string>();
  o.model.ninp = c.at("emsize"), o.model.nhid = c.at("nhid"), o.model.nlayers = c.at("nlayers");
  o.model.dropout = c.at("dropout"), o.model.tie_weights = c.at("tied");
  o.train.epochs = c.at("epochs"), o.train.steps = c.at("steps"), o.train.batch_size = c.at("batch_size");
  o.train.lr = c.at("lr");
  o.bptt = c.at("bptt"), o.clip = c.at("clip"), o.eval_batch_size = c.at("eval_batch_size"), o.seed = c.at("seed");
  o.train.backend = "gloo", o.train.device = "cpu", o.quiet = true;
  f.losses = j.at("losses").get<std::vector<double>>();
  for (const auto& v : j.at("val_losses")) f.val_losses.push_back(v.at(1).get<double>());
  REQUIRE(f.losses.size() == static_cast<size_t>(o.train.steps));
  return f;
}

void check_parity(const std::string& fixture, int world) {
  Fixture fx = load_fixture(fixture);
  REQUIRE(fx.options.train.batch_size % world == 0);
  uint16_t port = testing::free_port();
  auto results = testing::run_ranks(world, [&](int rank) {
    testing::init_tcp_group(port, world, rank, std::chrono::seconds(60));
    WordLMOptions o = fx.options;
    o.train.batch_size /= world;
    WordLMResult r = train_word_lm(o);
    RANK_CHECK(r.losses.size() == fx.losses.size(), "ran ", r.losses.size(), " steps");
    double worst = 0;
    for (size_t s = 0; s < fx.losses.size(); ++s) worst = std::max(worst, std::abs(r.losses[s] / fx.losses[s] - 1));
    if (rank == 0)
      std::printf("%s on %d rank(s): largest relative loss difference %.3g\n", fixture.c_str(), world, worst);
    for (size_t s = 0; s < fx.losses.size(); ++s)
      RANK_CHECK(std::abs(r.losses[s] - fx.losses[s]) <= 1e-4 * std::abs(fx.losses[s]), "step ", s, ": loss ",
                 r.losses[s], ", PyTorch's ", fx.losses[s]);
    RANK_CHECK(r.val_losses.size() == fx.val_losses.size(), r.val_losses.size(), " validations");
    for (size_t e = 0; e < fx.val_losses.size(); ++e)
      RANK_CHECK(std::abs(r.val_losses[e].second - fx.val_losses[e]) <= 1e-4 * fx.val_losses[e], "epoch ", e + 1,
                 ": valid loss ", r.val_losses[e].second, ", PyTorch's ", fx.val_losses[e]);
    dist::destroy_process_group();
  }, std::chrono::seconds(120));
  CHECK_MESSAGE(testing::all_ok(results), testing::failures(results));
}

}  // namespace

TEST_CASE("Corpus tokenises as data.py and splits by document, 8 of every 10 to train") {
  // 10 documents: d0 .. d7 train, d8 valid, d9 test; d1 is two lines, one of them empty.
  std::string text;
  for (int k = 0; k < 10; ++k) text += (k == 1 ? "b  a\t\n\n%\n" : "w" + std::to_string(k) + " a\n%\n");
  text += "tail";  // an 11th document without '\n' or '%': train
  Corpus c(text);
  const Dictionary& d = c.dictionary();
  // train: "w0 a <eos> % <eos>", "b a <eos> <eos> % <eos>", ..., "w7 a <eos> % <eos>", "tail <eos>"
  CHECK(d.word(0) == "w0");
  CHECK(d.word(1) == "a");
  CHECK(d.word(2) == "<eos>");
  CHECK(d.word(3) == "%");
  CHECK(d.word(4) == "b");
  const std::vector<int64_t>& train = c.tokens(Part::kTrain);
  const std::vector<int64_t> first(train.begin(), train.begin() + 11);
  CHECK(first == std::vector<int64_t>{0, 1, 2, 3, 2, 4, 1, 2, 2, 3, 2});
  CHECK(train.size() == 5u * 7 + 6 + 2);
  CHECK(d.word(train.end()[-2]) == "tail");
  // valid and test come after every train word in the dictionary, in that order.
  CHECK(c.tokens(Part::kValid).size() == 5u);
  CHECK(d.word(c.tokens(Part::kValid)[0]) == "w8");
  CHECK(d.word(c.tokens(Part::kTest)[0]) == "w9");
  CHECK(c.tokens(Part::kTest)[0] == c.tokens(Part::kValid)[0] + 1);
  CHECK(d.size() == 3 + 7 + 1 + 1 + 2);  // a <eos> %; w0, w2 .. w7; b; tail; w8, w9
  CHECK_THROWS_WITH_AS(Corpus("\n"), doctest::Contains("Corpus: the train part has 1 tokens"), Error);
}

TEST_CASE("batchify lays the text out in columns and get_batch reads bptt rows and the next ones") {
  std::vector<int64_t> tokens(11);
  for (int64_t i = 0; i < 11; ++i) tokens[i] = i;
  Tensor all = batchify(tokens, 2, 0, 2);  // 10 tokens kept: columns 0..4 and 5..9
  CHECK(all.shape() == Shape{5, 2});
  CHECK(ints(all) == std::vector<int64_t>{0, 5, 1, 6, 2, 7, 3, 8, 4, 9});
  CHECK(ints(batchify(tokens, 2, 1, 1)) == std::vector<int64_t>{5, 6, 7, 8, 9});  // rank 1 of 2: column 1
  auto [x, y] = get_batch(all, 0, 3);
  CHECK(ints(x) == std::vector<int64_t>{0, 5, 1, 6, 2, 7});
  CHECK(ints(y) == std::vector<int64_t>{1, 6, 2, 7, 3, 8});
  auto [x2, y2] = get_batch(all, 3, 3);  // min(bptt, rows - 1 - i) = 1 row
  CHECK(ints(x2) == std::vector<int64_t>{3, 8});
  CHECK(ints(y2) == std::vector<int64_t>{4, 9});
  CHECK_THROWS_WITH_AS(batchify(tokens, 12, 0, 12), doctest::Contains("cannot fill 12 columns"), Error);
  CHECK_THROWS_WITH_AS(get_batch(all, 4, 3), doctest::Contains("get_batch: row 4 leaves no target"), Error);
}

TEST_CASE("RNNModel has model.py's parameter names and shapes") {
  RNNModel lstm(RNNModelConfig{.ntoken = 11, .ninp = 4, .nhid = 6, .nlayers = 2});
  std::vector<std::string> names;
  for (auto& [name, p] : lstm->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"encoder.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
                                          "rnn.bias_hh_l0", "rnn.weight_ih_l1", "rnn.weight_hh_l1", "rnn.bias_ih_l1",
                                          "rnn.bias_hh_l1", "decoder.weight", "decoder.bias"});
  CHECK(lstm->encoder->weight.abs().max().item<float>() <= 0.1f);  // init_weights: uniform in ±0.1, bias 0
  CHECK(lstm->decoder->bias.abs().max().item<float>() == 0.0f);
  Hidden h = lstm->init_hidden(3);
  CHECK(h.h.shape() == Shape{2, 3, 6});
  CHECK(h.c.shape() == Shape{2, 3, 6});
  auto [out, next] = lstm(zeros({5, 3}, kInt64), h);
  CHECK(out.shape() == Shape{15, 11});
  CHECK((out.exp().sum(1) - 1.0).abs().max().item<float>() < 1e-5f);  // log-probabilities
  CHECK(next.c.shape() == Shape{2, 3, 6});

  RNNModel gru(RNNModelConfig{.rnn_type = "GRU", .ntoken = 7, .ninp = 4, .nhid = 4, .nlayers = 1,
                              .tie_weights = true});
  names.clear();
  for (auto& [name, p] : gru->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"encoder.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
                                          "rnn.bias_hh_l0", "decoder.bias"});  // decoder.weight is encoder.weight
  CHECK(gru->decoder->weight.data_ptr() == gru->encoder->weight.data_ptr());
  Hidden g = gru->init_hidden(2);
  CHECK(!g.c.defined());
  CHECK(std::get<0>(gru(zeros({3, 2}, kInt64), g)).shape() == Shape{6, 7});

  CHECK_THROWS_WITH_AS(RNNModel(RNNModelConfig{.rnn_type = "LSTMX", .ntoken = 5}),
                       doctest::Contains("rnn_type must be LSTM, GRU, RNN_TANH or RNN_RELU, got 'LSTMX'"), Error);
  CHECK_THROWS_WITH_AS(RNNModel(RNNModelConfig{.ntoken = 5, .ninp = 4, .nhid = 6, .tie_weights = true}),
                       doctest::Contains("nhid must be equal to emsize, got nhid 6 and emsize 4"), Error);
  CHECK_THROWS_WITH_AS(lstm(zeros({5, 3}, kInt64), g), doctest::Contains("needs (h, c)"), Error);
}

TEST_CASE("word_lm's LSTM on 1 rank at batch 4 follows PyTorch's losses") { check_parity("word_lm_parity.json", 1); }

TEST_CASE("word_lm's LSTM on 2 ranks at batch 2 follows the same losses") { check_parity("word_lm_parity.json", 2); }

TEST_CASE("word_lm's GRU with tied weights on 1 and 2 ranks follows PyTorch's losses") {
  check_parity("word_lm_gru_tied_parity.json", 1);
  check_parity("word_lm_gru_tied_parity.json", 2);
}
