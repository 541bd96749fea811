// Packed sequences against PyTorch: tests/fixtures/packed_fixtures.safetensors (written by
// tools/fixtures/make_packed_fixtures.py) holds, per recurrent case, PyTorch's parameters, padded input,
// unsorted lengths, state, the packed output, h_n (c_n) and the gradients of
// sum(out.data * g.out) + sum(h_n * g.h_n) (+ c_n) in float64; and the packing functions' results.
// Then hand-worked packing layouts, gradcheck through pack and pad, and the errors.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nn/api.h"
#include "nn/utils/rnn.h"
#include "tests/util/fixtures.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;
namespace rnn_utils = lockstep::nn::utils::rnn;

namespace {

const testing::Fixtures pfx("tests/fixtures/packed_fixtures.safetensors", "make_packed_fixtures.py");

void check_near(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-9) {
  testing::check_close(got, want, what, tol);
}

std::vector<int64_t> ints(const Tensor& t) { return t.to(kInt64).contiguous().to_vector<int64_t>(); }

using Outputs = std::map<std::string, Tensor>;
using Run = std::function<Outputs(const rnn_utils::PackedSequence&, Tensor&, Tensor&)>;

// Loads case c's parameters into m, packs c.x with c.lengths (enforce_sorted false), runs fn and
// compares the packed output, the padded output, the states and every gradient with PyTorch's.
void check_packed_case(const std::string& c, nn::Module& m, bool batch_first, const Run& fn) {
  INFO("case ", c);
  m.to(kFloat64);
  nn::NamedTensors state;
  for (auto& [k, v] : pfx.all())
    if (k.rfind(c + ".param.", 0) == 0) state.emplace_back(k.substr(c.size() + 7), v.clone());
  REQUIRE(state.size() == m.named_parameters().size());
  m.load_state_dict(state);
  Tensor x = pfx(c + ".x").set_requires_grad(), h0, c0;
  if (pfx.contains(c + ".h0")) h0 = pfx(c + ".h0").set_requires_grad();
  if (pfx.contains(c + ".c0")) c0 = pfx(c + ".c0").set_requires_grad();
  auto packed = rnn_utils::pack_padded_sequence(x, pfx(c + ".lengths"), batch_first, /*enforce_sorted=*/false);
  Outputs outs = fn(packed, h0, c0);
  auto [padded, lengths] = rnn_utils::pad_packed_sequence(
      rnn_utils::PackedSequence(outs.at("out"), packed.batch_sizes(), packed.sorted_indices()), batch_first);
  check_near(padded, pfx(c + ".padded"), c + ".padded");
  CHECK(ints(lengths) == ints(pfx(c + ".lengths")));
  CHECK(ints(packed.batch_sizes()) == ints(pfx(c + ".batch_sizes")));
  CHECK(ints(packed.sorted_indices()) == ints(pfx(c + ".sorted_indices")));
  CHECK(ints(packed.unsorted_indices()) == ints(pfx(c + ".unsorted_indices")));
  Tensor loss = zeros({}, kFloat64);
  for (auto& [k, o] : outs) {
    check_near(o, pfx(c + "." + k), c + "." + k);
    loss = loss + sum(o * pfx(c + ".g." + k));
  }
  loss.backward();
  check_near(x.grad(), pfx(c + ".grad.x"), c + ".grad.x");
  if (h0.defined()) check_near(h0.grad(), pfx(c + ".grad.h0"), c + ".grad.h0");
  if (c0.defined()) check_near(c0.grad(), pfx(c + ".grad.c0"), c + ".grad.c0");
  for (auto& [k, p] : m.named_parameters()) check_near(p.grad(), pfx(c + ".grad." + k), c + ".grad." + k);
}

}  // namespace

TEST_CASE("LSTM on a PackedSequence matches PyTorch: 2 layers, bidirectional, unsorted lengths, a state") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true));
  check_packed_case("lstm", *lstm, false, [&](const rnn_utils::PackedSequence& p, Tensor& h0, Tensor& c0) {
    auto [out, state] = lstm->forward_with_packed_input(p, std::make_tuple(h0, c0));
    CHECK(out.batch_sizes().is_same(p.batch_sizes()));
    return Outputs{{"out", out.data()}, {"h_n", std::get<0>(state)}, {"c_n", std::get<1>(state)}};
  });
}

TEST_CASE("GRU on a PackedSequence matches PyTorch: batch_first without a state, and with one") {
  nn::GRU bf(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true).batch_first(true));
  check_packed_case("gru", *bf, true, [&](const rnn_utils::PackedSequence& p, Tensor&, Tensor&) {
    auto [out, h] = bf->forward_with_packed_input(p);
    return Outputs{{"out", out.data()}, {"h_n", h}};
  });
  nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2).bidirectional(true));
  check_packed_case("gru_state", *gru, false, [&](const rnn_utils::PackedSequence& p, Tensor& h0, Tensor&) {
    auto [out, h] = gru->forward_with_packed_input(p, h0);
    return Outputs{{"out", out.data()}, {"h_n", h}};
  });
}

TEST_CASE("RNN on a PackedSequence matches PyTorch (the step-by-step path)") {
  nn::RNN rnn(nn::RNNOptions(3, 4).num_layers(2).bidirectional(true));
  check_packed_case("rnn", *rnn, false, [&](const rnn_utils::PackedSequence& p, Tensor& h0, Tensor&) {
    auto [out, h] = rnn->forward_with_packed_input(p, h0);
    return Outputs{{"out", out.data()}, {"h_n", h}};
  });
}

TEST_CASE("A packed batch of equal lengths gives the unpacked layer's results") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true));
  Tensor x = randn({5, 2, 3});
  auto [out, state] = lstm(x);
  auto [pout, pstate] = lstm->forward_with_packed_input(rnn_utils::pack_padded_sequence(x, std::vector<int64_t>{5, 5}));
  auto [padded, lengths] = rnn_utils::pad_packed_sequence(pout);
  check_near(padded, out, "packed out", 1e-6);
  check_near(std::get<0>(pstate), std::get<0>(state), "packed h_n", 1e-6);
  check_near(std::get<1>(pstate), std::get<1>(state), "packed c_n", 1e-6);
}

TEST_CASE("pack_padded_sequence, pad_packed_sequence and pad_sequence match PyTorch") {
  auto packed = rnn_utils::pack_padded_sequence(pfx("pack.x"), pfx("pack.lengths"), true, false);
  check_near(packed.data(), pfx("pack.data"), "pack.data", 0);
  CHECK(ints(packed.batch_sizes()) == ints(pfx("pack.batch_sizes")));
  CHECK(ints(packed.sorted_indices()) == ints(pfx("pack.sorted_indices")));
  CHECK(ints(packed.unsorted_indices()) == ints(pfx("pack.unsorted_indices")));
  CHECK(packed.batch_sizes().dtype() == kInt64);
  auto [padded, lengths] = rnn_utils::pad_packed_sequence(packed, false, -1.5, 7);
  check_near(padded, pfx("pack.padded"), "pack.padded", 0);
  CHECK(ints(lengths) == ints(pfx("pack.padded_lengths")));
  CHECK(lengths.dtype() == kInt64);
  Tensor left = rnn_utils::pad_sequence({pfx("padseq.s0"), pfx("padseq.s1"), pfx("padseq.s2")}, true, 9.0, "left");
  check_near(left, pfx("padseq.left"), "padseq.left", 0);
}

TEST_CASE("Packing layouts worked by hand") {
  // Sequences a (3 steps), b (1), c (2), rows of value 10 * sequence + step.
  Tensor a = tensor({10., 11., 12.}, {3, 1}), b = tensor({20.}, {1, 1}), c = tensor({30., 31.}, {2, 1});
  Tensor right = rnn_utils::pad_sequence({a, b, c}, false, -1);  // [3, 3, 1]
  CHECK(right.shape() == Shape{3, 3, 1});
  CHECK(right.contiguous().to_vector<double>() == std::vector<double>{10, 20, 30, 11, -1, 31, 12, -1, -1});
  // Sorted a, c, b: step 0 has 3 rows, step 1 two, step 2 one.
  auto packed = rnn_utils::pack_sequence({a, b, c}, /*enforce_sorted=*/false);
  CHECK(packed.data().contiguous().to_vector<double>() == std::vector<double>{10, 30, 20, 11, 31, 12});
  CHECK(ints(packed.batch_sizes()) == std::vector<int64_t>{3, 2, 1});
  CHECK(ints(packed.sorted_indices()) == std::vector<int64_t>{0, 2, 1});
  CHECK(ints(packed.unsorted_indices()) == std::vector<int64_t>{0, 2, 1});
  auto [back, lengths] = rnn_utils::pad_packed_sequence(packed, true);
  CHECK(back.shape() == Shape{3, 3, 1});
  CHECK(back.contiguous().to_vector<double>() == std::vector<double>{10, 11, 12, 20, 0, 0, 30, 31, 0});
  CHECK(ints(lengths) == std::vector<int64_t>{3, 1, 2});
  // Already sorted: no permutation is recorded.
  auto sorted = rnn_utils::pack_sequence({a, c, b});
  CHECK_FALSE(sorted.sorted_indices().defined());
  CHECK_FALSE(sorted.unsorted_indices().defined());
  CHECK(ints(rnn_utils::invert_permutation(tensor({int64_t(2), int64_t(0), int64_t(1)}, {3}))) ==
        std::vector<int64_t>{1, 2, 0});
}

TEST_CASE("Gradients flow through pack_padded_sequence and pad_packed_sequence (float64 gradcheck)") {
  Tensor x = randn({4, 3, 2}, TensorOptions(kFloat64));
  testing::gradcheck(
      [](const std::vector<Tensor>& in) {
        auto p = rnn_utils::pack_padded_sequence(in[0], std::vector<int64_t>{2, 4, 1}, false, false);
        return std::get<0>(rnn_utils::pad_packed_sequence(rnn_utils::PackedSequence(p.data() * p.data(), p.batch_sizes(),
                                                                                   p.sorted_indices()),
                                                          true, 0.5, 5));
      },
      {x});
  testing::gradcheck([](const std::vector<Tensor>& in) { return rnn_utils::pad_sequence({in[0], in[1]}, false, 0, "left"); },
                     {randn({2, 3}, TensorOptions(kFloat64)), randn({4, 3}, TensorOptions(kFloat64))});
}

TEST_CASE("Packing and packed recurrent layers reject bad input in PyTorch's words") {
  Tensor x = zeros({4, 3, 2});
  CHECK(error_of([&] { rnn_utils::pack_padded_sequence(x, std::vector<int64_t>{2, 3, 1}); })
            .find("`lengths` array must be sorted in decreasing order") != std::string::npos);
  CHECK(error_of([&] { rnn_utils::pack_padded_sequence(x, std::vector<int64_t>{2, 1}); })
            .find("Expected `len(lengths)` to be equal to batch_size, but got 2 (batch_size=3)") != std::string::npos);
  CHECK(error_of([&] { rnn_utils::pack_padded_sequence(x, std::vector<int64_t>{2, 1, 0}); })
            .find("Length of all samples has to be greater than 0") != std::string::npos);
  CHECK(error_of([&] { rnn_utils::pack_padded_sequence(x, std::vector<int64_t>{5, 1, 1}); })
            .find("length 5 is longer than the input's 4 time steps") != std::string::npos);
  auto packed = rnn_utils::pack_padded_sequence(x, std::vector<int64_t>{3, 2, 1});
  CHECK(error_of([&] { rnn_utils::pad_packed_sequence(packed, false, 0, 2); })
            .find("Expected total_length to be at least the length of the longest sequence in input, but got "
                  "total_length=2 and max sequence length being 3") != std::string::npos);
  CHECK(error_of([] { rnn_utils::pad_sequence({}); }).find("received an empty list of sequences") != std::string::npos);
  CHECK(error_of([] { rnn_utils::pad_sequence({zeros({2, 3}), zeros({2, 4})}); })
            .find("pad_sequence: sequence 1 has shape [2, 4]") != std::string::npos);
  CHECK(error_of([] { rnn_utils::pad_sequence({zeros({2, 3})}, false, 0, "middle"); })
            .find("Expected padding_side to be one of left or right, but got middle.") != std::string::npos);
  CHECK(error_of([] { rnn_utils::PackedSequence(zeros({5, 2}), tensor({int64_t(3), int64_t(1)}, {2})); })
            .find("batch_sizes sum to 4 but data has 5 rows") != std::string::npos);
  nn::LSTM lstm(nn::LSTMOptions(2, 4).num_layers(2));
  const std::string state_error =
      error_of([&] { lstm->forward_with_packed_input(packed, std::make_tuple(zeros({2, 2, 4}), zeros({2, 2, 4}))); });
  CHECK(state_error.find("LSTM: expected h0 of shape [2, 3, 4] for a PackedSequence of 3 sequences, got [2, 2, 4]") !=
        std::string::npos);
  nn::GRU gru(nn::GRUOptions(3, 4));
  CHECK(error_of([&] { gru->forward_with_packed_input(packed); }).find("GRU(3, 4): expected input") != std::string::npos);
}
