// Padding and the reshaping layers against PyTorch: tests/fixtures/padding_fixtures.safetensors (written by
// tools/fixtures/make_padding_fixtures.py) holds, per case, the inputs, PyTorch's float64 output and the
// gradients of sum(out * gout): F::pad in its four modes and the padding modules, the pixel shuffles,
// Unflatten, F::unfold / F::fold and F::bilinear. Then hand-computed values, float64 gradchecks, the dropout
// variants' rules (exact per element or per channel, whatever the draw), and the errors in PyTorch's words.
// Part of the nn_layers_test binary.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::contains;
using lockstep::testing::error_of;
namespace F = lockstep::nn::functional;

namespace {


const testing::Fixtures fx("tests/fixtures/padding_fixtures.safetensors", "make_padding_fixtures.py");

void check_close(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-12) {
  testing::check_close(got, want, what, tol);
}

using CaseFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs fn on case c's named inputs (leaves requiring grad) and compares out and every input's gradient.
void check_case(const std::string& c, const std::vector<std::string>& inputs, const CaseFn& fn) {
  INFO("case ", c);
  std::vector<Tensor> leaves;
  for (auto& n : inputs) leaves.push_back(fx(c + "." + n).set_requires_grad());
  Tensor out = fn(leaves);
  check_close(out, fx(c + ".out"), c + ".out");
  sum(out * fx(c + ".gout")).backward();
  for (size_t i = 0; i < inputs.size(); ++i)
    check_close(leaves[i].grad(), fx(c + ".grad." + inputs[i]), c + ".grad." + inputs[i]);
}

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }

}  // namespace

TEST_CASE("F::pad constant: any trailing dimensions, a fill value, negative pads crop") {
  check_case("pad_constant_1d", {"x"}, [](auto& v) { return F::pad(v[0], F::PadFuncOptions({1, 2}).value(0.5)); });
  check_case("pad_constant_neg", {"x"}, [](auto& v) { return F::pad(v[0], F::PadFuncOptions({-1, 2, 1, -2})); });
  check_case("pad_constant_3dims", {"x"}, [](auto& v) {
    return F::pad(v[0], F::PadFuncOptions({1, 0, 0, 2, 1, 1}).mode(nn::kConstant).value(-1.5));
  });
  check_case("pad_constant_all", {"x"}, [](auto& v) {
    return F::pad(v[0], F::PadFuncOptions({1, 1, 0, 1, 2, 0, 1, 1}));
  });
  check_case("pad_constant_crop_to_empty", {"x"}, [](auto& v) { return F::pad(v[0], F::PadFuncOptions({-3, 0})); });
  // pad2d is the constant pad of the last two dimensions.
  Tensor x = randn({2, 3, 4}, kFloat64);
  CHECK(values(F::pad2d(x, 1, 2, 3, 0, 0.5)) == values(F::pad(x, F::PadFuncOptions({1, 2, 3, 0}).value(0.5))));
}

TEST_CASE("F::pad reflect, replicate and circular match PyTorch on 1, 2 and 3 dimensions, batched or not") {
  const std::map<std::string, std::map<int, std::vector<int64_t>>> pads = {
      {"reflect", {{1, {2, 3}}, {2, {1, 3, 2, 0}}, {3, {1, 2, 2, 1, 2, 0}}}},
      {"replicate", {{1, {4, 7}}, {2, {3, 1, 0, 5}}, {3, {2, 0, 1, 3, 4, 1}}}},
      {"circular", {{1, {4, 2}}, {2, {1, 4, 3, 2}}, {3, {2, 1, 0, 3, 2, 1}}}},
  };
  auto options = [](const std::string& mode, std::vector<int64_t> p) {
    F::PadFuncOptions o(std::move(p));
    if (mode == "reflect") o.mode(nn::kReflect);
    if (mode == "replicate") o.mode(nn::kReplicate);
    if (mode == "circular") o.mode(nn::kCircular);
    return o;
  };
  for (auto& [mode, by_dims] : pads) {
    for (auto& [d, p] : by_dims) {
      const std::string c = "pad_" + mode + "_" + std::to_string(d) + "d";
      const F::PadFuncOptions o = options(mode, p);
      check_case(c, {"x"}, [&](auto& v) { return F::pad(v[0], o); });
      check_case(c + "_unbatched", {"x"}, [&](auto& v) { return F::pad(v[0], o); });
    }
  }
  check_case("pad_reflect_neg", {"x"}, [&](auto& v) { return F::pad(v[0], options("reflect", {-1, 2, 2, -1})); });
  check_case("pad_replicate_neg", {"x"}, [&](auto& v) { return F::pad(v[0], options("replicate", {2, -2})); });
  check_case("pad_circular_neg", {"x"}, [&](auto& v) { return F::pad(v[0], options("circular", {-1, 2, 0, -2})); });
}

TEST_CASE("F::pad by hand: the source of each position, and gradients summed where one element is copied") {
  Tensor x = tensor({1.0, 2.0, 3.0}, {1, 3}).set_requires_grad();
  CHECK(values(F::pad(x, F::PadFuncOptions({2, 1}).mode(nn::kReflect))) == std::vector<double>{3, 2, 1, 2, 3, 2});
  CHECK(values(F::pad(x, F::PadFuncOptions({2, 1}).mode(nn::kReplicate))) == std::vector<double>{1, 1, 1, 2, 3, 3});
  CHECK(values(F::pad(x, F::PadFuncOptions({2, 1}).mode(nn::kCircular))) == std::vector<double>{2, 3, 1, 2, 3, 1});
  CHECK(values(F::pad(x, F::PadFuncOptions({-1, 1}).value(9))) == std::vector<double>{2, 3, 9});
  // Circular padding crops first, then wraps around what is left.
  Tensor r = arange(5, kFloat64).reshape({1, 5});
  CHECK(values(F::pad(r, F::PadFuncOptions({-1, 2}).mode(nn::kCircular))) == std::vector<double>{1, 2, 3, 4, 1, 2});
  CHECK(values(F::pad(r, F::PadFuncOptions({2, -1}).mode(nn::kCircular))) == std::vector<double>{2, 3, 0, 1, 2, 3});
  CHECK(F::pad(randn({1, 2, 3}), F::PadFuncOptions({1, 1}).mode(nn::kReflect)).dtype() == kFloat32);
  sum(F::pad(x, F::PadFuncOptions({2, 1}).mode(nn::kReflect))).backward();
  CHECK(values(x.grad()) == std::vector<double>{1, 3, 2});  // x0 once; x1 three times; x2 twice
  testing::gradcheck(
      [](auto& v) {
        return F::pad(v[0], F::PadFuncOptions({2, 1, 1, 2}).mode(nn::kReflect));
      },
      {randn({2, 3, 4}, kFloat64)});
  testing::gradcheck(
      [](auto& v) {
        return F::pad(v[0], F::PadFuncOptions({3, 1}).mode(nn::kCircular));
      },
      {randn({2, 2, 3}, kFloat64)});
}

TEST_CASE("Padding modules: ReflectionPad, ReplicationPad, CircularPad, ZeroPad, ConstantPad") {
  check_case("mod_reflection2d", {"x"}, [](auto& v) {
    return nn::ReflectionPad2d(nn::ReflectionPad2dOptions({1, 1, 2, 2}))(v[0]);
  });
  check_case("mod_reflection1d", {"x"}, [](auto& v) { return nn::ReflectionPad1d(2)(v[0]); });
  check_case("mod_replication3d", {"x"},
             [](auto& v) { return nn::ReplicationPad3d(nn::ReplicationPad3dOptions(1))(v[0]); });
  check_case("mod_circular1d", {"x"}, [](auto& v) { return nn::CircularPad1d(2)(v[0]); });
  check_case("mod_zero2d", {"x"}, [](auto& v) { return nn::ZeroPad2d(nn::ZeroPad2dOptions({1, 0, 2, 1}))(v[0]); });
  check_case("mod_constant3d", {"x"},
             [](auto& v) { return nn::ConstantPad3d(nn::ConstantPad3dOptions(1, 3.5))(v[0]); });
  nn::ConstantPad1d pad(2, -1.0);
  CHECK(pad->options.padding() == nn::ExpandingArray<2>({2, 2}));
  CHECK(values(pad(tensor({5.0}, {1, 1}))) == std::vector<double>{-1, -1, 5, -1, -1});
  CHECK(nn::ReflectionPad2d(3)->name() == "ReflectionPad2d");
}

TEST_CASE("F::pad rejects what PyTorch rejects, in its words") {
  Tensor x = randn({1, 2, 3});
  CHECK(contains(error_of([&] {
                   F::pad(x, F::PadFuncOptions({3, 3}).mode(nn::kReflect));
                 }),
                 "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding "
                 "(3, 3) at dimension 2 of input [1, 2, 3]"));
  CHECK(contains(error_of([&] {
                   F::pad(randn({1, 2, 3, 4}), F::PadFuncOptions({1, 1, 3, 1}).mode(nn::kReflect));
                 }),
                 "Argument #6: Padding size should be less than the corresponding input dimension, but got: padding "
                 "(3, 1) at dimension 2 of input [1, 2, 3, 4]"));
  CHECK(contains(error_of([&] { F::pad(x, F::PadFuncOptions({1})); }), "Padding length must be divisible by 2"));
  CHECK(contains(error_of([&] {
                   F::pad(x, F::PadFuncOptions({1, 1, 1, 1, 1, 1, 1, 1}));
                 }),
                 "Padding length should be less than or equal to two times the input dimension but got padding length "
                 "8 and input of dimension 3"));
  CHECK(contains(error_of([&] {
                   F::pad(x, F::PadFuncOptions({1, 1}).mode(nn::kReflect).value(2));
                 }),
                 "Padding mode \"reflect\" doesn't take in value argument"));
  CHECK(contains(error_of([&] {
                   F::pad(x, F::PadFuncOptions({-2, -2}));
                 }),
                 "The input size 3, plus negative padding -2 and -2 resulted in a negative output size, which is "
                 "invalid. Check dimension 2 of your input."));
  CHECK(contains(error_of([&] {
                   F::pad(x, F::PadFuncOptions({4, 1}).mode(nn::kCircular));
                 }),
                 "Padding value causes wrapping around more than once."));
  CHECK(contains(error_of([&] {
                   F::pad(x, F::PadFuncOptions({-3, -1}).mode(nn::kCircular));
                 }),
                 "Negative padding value is resulting in an empty dimension"));
  CHECK(contains(error_of([&] {
                   F::pad(randn({3}), F::PadFuncOptions({1, 1}).mode(nn::kReplicate));
                 }),
                 "Padding size 2 is not supported for 1D input tensor."));
  CHECK(contains(error_of([&] {
                   F::pad(randn({2, 3, 4, 5}), F::PadFuncOptions({1, 1}).mode(nn::kReflect));
                 }),
                 "Padding size 2 is not supported for 4D input tensor."));
  CHECK(contains(error_of([&] {
                   F::pad(randn({2, 0, 4}), F::PadFuncOptions({1, 1}).mode(nn::kReflect));
                 }),
                 "Expected 2D or 3D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for "
                 "input, but got: [2, 0, 4]"));
  CHECK(contains(error_of([&] {
                   F::pad(x, F::PadFuncOptions({-2, -2}).mode(nn::kReplicate));
                 }),
                 "input (W: 3) is too small. Calculated output W: -1"));
  CHECK(contains(error_of([&] { nn::ReflectionPad2d(2)(randn({1, 1, 2, 2})); }), "Padding size should be less"));
  CHECK(contains(error_of([&] { F::pad2d(x, -1, 0, 0, 0); }), "pad2d: padding must be non-negative"));
}

TEST_CASE("PixelShuffle, PixelUnshuffle and Unflatten match PyTorch") {
  check_case("pixel_shuffle", {"x"}, [](auto& v) { return nn::PixelShuffle(nn::PixelShuffleOptions(2))(v[0]); });
  check_case("pixel_shuffle_5d", {"x"}, [](auto& v) { return F::pixel_shuffle(v[0], 3); });
  check_case("pixel_unshuffle", {"x"},
             [](auto& v) { return F::pixel_unshuffle(v[0], F::PixelUnshuffleFuncOptions(2)); });
  check_case("pixel_unshuffle_unbatched", {"x"}, [](auto& v) { return nn::PixelUnshuffle(3)(v[0]); });
  check_case("unflatten", {"x"}, [](auto& v) { return nn::Unflatten(nn::UnflattenOptions(1, {3, -1}))(v[0]); });
  // The two are inverses; unshuffle then shuffle moves every element back.
  Tensor x = randn({2, 3, 4, 6}, kFloat64);
  CHECK(values(F::pixel_shuffle(F::pixel_unshuffle(x, 2), 2)) == values(x));
  // out[c, h r + i, w r + j] = in[c r^2 + i r + j, h, w], with in[k, 0, w] = 2 k + w.
  Tensor s = F::pixel_shuffle(arange(16, kFloat64).reshape({8, 1, 2}), 2);
  CHECK(s.shape() == Shape{2, 2, 4});
  CHECK(values(s) == std::vector<double>{0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15});
  CHECK(values(nn::Unflatten(-1, std::vector<int64_t>{2, 3})(randn({4, 6}))).size() == 24);
  CHECK(nn::Unflatten(0, std::vector<int64_t>{-1, 2})(randn({6, 5})).shape() == Shape{3, 2, 5});
  CHECK(contains(error_of([] {
                   F::pixel_shuffle(randn({4, 4}), 2);
                 }),
                 "pixel_shuffle expects input to have at least 3 dimensions, but got input with 2 dimension(s)"));
  CHECK(contains(error_of([] {
                   F::pixel_shuffle(randn({5, 4, 4}), 2);
                 }),
                 "pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                 "upscale_factor, but input.size(-3)=5 is not divisible by 4"));
  CHECK(contains(error_of([] { F::pixel_shuffle(randn({4, 4, 4}), 0); }), "positive upscale_factor, but got 0"));
  CHECK(contains(error_of([] {
                   F::pixel_unshuffle(randn({1, 5, 4}), 2);
                 }),
                 "pixel_unshuffle expects height to be divisible by downscale_factor, but input.size(-2)=5 is not "
                 "divisible by 2"));
  CHECK(contains(error_of([] { F::pixel_unshuffle(randn({1, 4, 5}), 2); }), "input.size(-1)=5 is not divisible"));
  CHECK(contains(error_of([] {
                   nn::Unflatten(1, std::vector<int64_t>{2, 3})(randn({2, 7}));
                 }),
                 "unflatten: Provided sizes [2, 3] don't multiply up to the size of dim 1 (7) in the input tensor"));
  CHECK(contains(error_of([] {
                   nn::Unflatten(1, std::vector<int64_t>{-1, -1})(randn({2, 6}));
                 }),
                 "only one dimension can be inferred"));
  CHECK(contains(error_of([] {
                   nn::Unflatten(1, std::vector<int64_t>{})(randn({2, 6}));
                 }),
                 "unflatten: sizes must be non-empty"));
}

TEST_CASE("Unfold and Fold match PyTorch; fold is unfold's adjoint") {
  const auto uo = F::UnfoldFuncOptions({2, 3}).dilation({2, 1}).padding({1, 2}).stride({2, 1});
  check_case("unfold", {"x"}, [&](auto& v) { return F::unfold(v[0], uo); });
  check_case("unfold_unbatched", {"x"},
             [](auto& v) { return nn::Unfold(nn::UnfoldOptions(3).padding(1).stride(2))(v[0]); });
  const auto fo = F::FoldFuncOptions({6, 7}, {2, 3}).dilation({2, 1}).padding({1, 2}).stride({2, 1});
  check_case("fold", {"x"}, [&](auto& v) { return F::fold(v[0], fo); });
  check_case("fold_unbatched", {"x"}, [](auto& v) { return nn::Fold(nn::FoldOptions({5, 4}, 2))(v[0]); });
  check_case("fold_of_unfold", {"x"}, [](auto& v) {
    return F::fold(F::unfold(v[0], F::UnfoldFuncOptions(3).padding(1)), F::FoldFuncOptions({4, 5}, 3).padding(1));
  });
  // <unfold(x), y> = <x, fold(y)>.
  Tensor x = randn({2, 3, 6, 7}, kFloat64), y = randn({2, 18, 27}, kFloat64);
  const double lhs = sum(F::unfold(x, uo) * y).item<double>(), rhs = sum(x * F::fold(y, fo)).item<double>();
  CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
  testing::gradcheck([&](auto& v) { return F::unfold(v[0], uo); }, {randn({1, 2, 6, 7}, kFloat64)});
  testing::gradcheck(
      [](auto& v) {
        return F::fold(v[0], F::FoldFuncOptions({3, 4}, 2));
      },
      {randn({1, 8, 6}, kFloat64)});
  CHECK(contains(error_of([] {
                   F::unfold(randn({1, 2, 3, 4, 5}), F::UnfoldFuncOptions(2));
                 }),
                 "Expected 3D or 4D (batch mode) tensor"));
  CHECK(contains(error_of([] {
                   F::unfold(randn({1, 2, 3, 4}), F::UnfoldFuncOptions(5));
                 }),
                 "Given input with spatial size (3, 4), kernel_size=(5, 5), dilation=(1, 1), padding=(0, 0), "
                 "calculated shape of the array of sliding blocks as (-1, 0), but its components must be at least "
                 "one."));
  CHECK(contains(error_of([] {
                   F::unfold(randn({1, 2, 3, 4}), F::UnfoldFuncOptions(2).stride(0));
                 }),
                 "stride should be greater than zero, but got stride_height: 0 stride_width: 0"));
  CHECK(contains(error_of([] {
                   F::unfold(randn({1, 2, 3, 4}), F::UnfoldFuncOptions(0));
                 }),
                 "kernel size should be greater than zero"));
  CHECK(contains(error_of([] {
                   F::unfold(randn({1, 2, 3, 4}), F::UnfoldFuncOptions(2).padding(-1));
                 }),
                 "padding should be non-negative, but got pad_height: -1 pad_width: -1"));
  CHECK(contains(error_of([] {
                   F::fold(randn({1, 7, 4}), F::FoldFuncOptions({3, 3}, 2));
                 }),
                 "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got "
                 "input.size(1)=7 and kernel_size=(2, 2)."));
  CHECK(contains(error_of([] {
                   F::fold(randn({1, 8, 5}), F::FoldFuncOptions({3, 3}, 2));
                 }),
                 "Given output_size=(3, 3), kernel_size=(2, 2), dilation=(1, 1), padding=(0, 0), stride=(1, 1), "
                 "expected size of input's dimension 2 to match the calculated number of sliding blocks 2 * 2 = 4, but "
                 "got input.size(2)=5."));
  CHECK(contains(error_of([] {
                   F::fold(randn({1, 2, 3, 4}), F::FoldFuncOptions({3, 3}, 2));
                 }),
                 "Expected 2D or 3D (batch mode) tensor for input"));
}

TEST_CASE("Bilinear matches PyTorch; PyTorch's initialisation bounds; errors") {
  check_case("bilinear", {"x1", "x2", "weight", "bias"}, [](auto& v) { return F::bilinear(v[0], v[1], v[2], v[3]); });
  check_case("bilinear_3d", {"x1", "x2", "weight"}, [](auto& v) { return F::bilinear(v[0], v[1], v[2]); });
  check_case("bilinear_1d", {"x1", "x2", "weight", "bias"},
             [](auto& v) { return F::bilinear(v[0], v[1], v[2], v[3]); });
  nn::Bilinear m(nn::BilinearOptions(3, 5, 6));
  m->to(kFloat64);
  m->load_state_dict({{"weight", fx("bilinear.weight")}, {"bias", fx("bilinear.bias")}});
  check_close(m(fx("bilinear.x1"), fx("bilinear.x2")), fx("bilinear.out"), "Bilinear module");
  // weight and bias uniform in +-1 / sqrt(in1).
  nn::Bilinear big(nn::BilinearOptions(16, 20, 30));
  const auto w = values(big->weight), b = values(big->bias);
  double wmax = 0;
  for (double v : w) wmax = std::max(wmax, std::abs(v));
  CHECK(wmax <= 0.25);
  CHECK(wmax > 0.24);  // 9600 draws: the largest is within 1% of the bound
  for (double v : b) CHECK(std::abs(v) <= 0.25);
  CHECK(big->weight.shape() == Shape{30, 16, 20});
  CHECK(!nn::Bilinear(nn::BilinearOptions(2, 3, 4).bias(false))->bias.defined());
  CHECK(nn::Bilinear(2, 3, 4)->named_parameters().size() == 2);
  testing::gradcheck(
      [](auto& v) { return F::bilinear(v[0], v[1], v[2], v[3]); },
      {randn({2, 3}, kFloat64), randn({2, 2}, kFloat64), randn({4, 3, 2}, kFloat64), randn({4}, kFloat64)});
  Tensor w3 = randn({5, 3, 4});
  CHECK(contains(error_of([&] {
                   F::bilinear(randn({2, 3}), randn({2, 2, 4}), w3);
                 }),
                 "bilinear(): input dimensions do not match: got 2 and 3"));
  CHECK(contains(error_of([&] {
                   F::bilinear(randn({2, 3}), randn({3, 4}), w3);
                 }),
                 "bilinear(): input batch dimensions do not match at dim 0: got 2 and 3"));
  CHECK(contains(error_of([&] {
                   F::bilinear(randn({2, 2}), randn({2, 4}), w3);
                 }),
                 "bilinear(): input1 size does not match weight size: got 2 but expected 3"));
  CHECK(contains(error_of([&] {
                   F::bilinear(randn({2, 3}), randn({2, 3}), w3);
                 }),
                 "bilinear(): input2 size does not match weight size: got 3 but expected 4"));
  CHECK(contains(error_of([&] {
                   F::bilinear(randn({2, 3}), randn({2, 4}), w3, randn({4}));
                 }),
                 "bilinear(): bias size does not match weight size: got 4 but expected 5"));
}

namespace {
// Per (sample, channel) map of `out` over `x` [N, C, ...]: every map is either all `dropped` or all
// x * scale + shift. Returns {dropped maps, kept maps}.
std::pair<int, int> channel_pattern(const Tensor& x, const Tensor& out, double scale, double shift = 0,
                                    double dropped = 0) {
  const int64_t maps = x.size(0) * x.size(1), per = x.numel() / maps;
  const auto xv = values(x), ov = values(out);
  int n_dropped = 0, n_kept = 0;
  for (int64_t m = 0; m < maps; ++m) {
    bool is_dropped = true, is_kept = true;
    for (int64_t i = m * per; i < (m + 1) * per; ++i) {
      is_dropped = is_dropped && std::abs(ov[i] - dropped) <= 1e-12;
      is_kept = is_kept && std::abs(ov[i] - (xv[i] * scale + shift)) <= 1e-12 * (1 + std::abs(xv[i]));
    }
    CHECK_MESSAGE((is_dropped || is_kept), "map ", m, " is neither dropped nor kept whole");
    n_dropped += is_dropped, n_kept += is_kept && !is_dropped;
  }
  return {n_dropped, n_kept};
}
}  // namespace

TEST_CASE("Dropout1d/2d/3d drop whole channels and scale the rest by 1 / (1 - p); eval is the identity") {
  manual_seed(7);
  Tensor x = add(rand({8, 40, 3, 3}, kFloat64), 0.5).set_requires_grad();
  nn::Dropout2d drop(nn::Dropout2dOptions(0.25));
  Tensor out = drop(x);
  auto [dropped, kept] = channel_pattern(x, out, 1 / 0.75);
  CHECK(dropped > 0);
  CHECK(kept > 0);
  CHECK(dropped + kept == 320);
  CHECK(std::abs(dropped / 320.0 - 0.25) < 0.12);  // 320 draws: 5 standard deviations
  sum(out).backward();                             // the gradient is the scaled mask: out / x
  check_close(x.grad(), div(out, x).detach(), "Dropout2d gradient");
  drop->eval();
  CHECK(values(drop(x)) == values(x));
  // One draw per channel of every rank, batched or not.
  Tensor x1 = add(rand({30, 5}, kFloat64), 0.5);
  channel_pattern(x1.unsqueeze(0), F::dropout1d(x1, F::Dropout1dFuncOptions().p(0.5)).unsqueeze(0), 2);
  Tensor x3 = add(rand({2, 10, 2, 3, 2}, kFloat64), 0.5);
  channel_pattern(x3, nn::Dropout3d(0.5)(x3), 2);
  channel_pattern(x3.select(0, 0).unsqueeze(0),
                  F::dropout3d(x3.select(0, 0), F::Dropout3dFuncOptions().p(0.5)).unsqueeze(0), 2);
  channel_pattern(x3.select(4, 0), F::dropout2d(x3.select(4, 0)), 2);
  CHECK(values(F::dropout2d(x3.select(4, 0), F::Dropout2dFuncOptions().p(1))) == std::vector<double>(120, 0.0));
  CHECK(values(F::dropout2d(x3.select(4, 0), F::Dropout2dFuncOptions().p(0))) == values(x3.select(4, 0)));
  CHECK(values(F::dropout(x1, F::DropoutFuncOptions().training(false))) == values(x1));
  CHECK(contains(error_of([] {
                   F::dropout1d(randn({2, 3, 4, 5}));
                 }),
                 "dropout1d: Expected 2D or 3D input, but received a 4D input. Note that dropout1d exists to provide "
                 "channel-wise dropout on inputs with 1 spatial dimension, a channel dimension, and an optional batch "
                 "dimension (i.e. 2D or 3D inputs)."));
  CHECK(contains(error_of([] { F::dropout2d(randn({2, 3}), F::Dropout2dFuncOptions()); }), "Expected 3D or 4D input"));
  CHECK(contains(error_of([] { nn::Dropout3d(1.5); }), "dropout probability has to be between 0 and 1, but got 1.5"));
  CHECK(contains(error_of([] {
                   F::dropout2d(randn({1, 2, 3}), F::Dropout2dFuncOptions().p(-0.1));
                 }),
                 "dropout probability has to be between 0 and 1"));
  CHECK(nn::Dropout(nn::DropoutOptions(0.3))->p == 0.3);
}

TEST_CASE("AlphaDropout and FeatureAlphaDropout: PyTorch's affine map of kept and dropped values") {
  manual_seed(11);
  const double p = 0.2, alpha = 1.7580993408473766, a = 1 / std::sqrt((alpha * alpha * p + 1) * (1 - p));
  Tensor x = randn({50, 40}, kFloat64).set_requires_grad();
  nn::AlphaDropout drop(p);
  Tensor out = drop(x);
  sum(out).backward();
  const auto xv = values(x), ov = values(out), gv = values(x.grad());
  int kept = 0, dropped = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool is_kept = std::abs(ov[i] - (a * xv[i] + alpha * a * p)) <= 1e-12;
    const bool is_dropped = std::abs(ov[i] - (-alpha * a + alpha * a * p)) <= 1e-12;
    CHECK_MESSAGE((is_kept || is_dropped), "element ", i, ": ", ov[i], " is neither kept nor dropped");
    CHECK(gv[i] == doctest::Approx(is_dropped ? 0.0 : a));
    kept += is_kept, dropped += is_dropped && !is_kept;
  }
  CHECK(std::abs(dropped / 2000.0 - p) < 0.05);  // 2000 draws: 5.6 standard deviations
  drop->eval();
  CHECK(values(drop(x)) == xv);
  // The functional form is off by default, as LibTorch's.
  CHECK(values(F::alpha_dropout(x)) == xv);
  CHECK(values(F::alpha_dropout(x, F::AlphaDropoutFuncOptions().p(1).training(true))) == std::vector<double>(2000, 0));
  // Feature alpha dropout: one draw per channel of [N, C, H, W].
  Tensor xf = randn({4, 30, 2, 3}, kFloat64);
  Tensor of = nn::FeatureAlphaDropout(nn::FeatureAlphaDropoutOptions(0.5))(xf);
  const double af = 1 / std::sqrt((alpha * alpha * 0.5 + 1) * 0.5);
  auto [d0, k0] = channel_pattern(xf, of, af, alpha * af * 0.5, -alpha * af + alpha * af * 0.5);
  CHECK(k0 > 0);
  CHECK(d0 > 0);
  CHECK(d0 + k0 == 120);
  CHECK(contains(
      error_of([] { F::feature_alpha_dropout(randn({5}), F::FeatureAlphaDropoutFuncOptions().training(true)); }),
      "Feature dropout requires at least 2 dimensions in the input"));
  CHECK(contains(error_of([] { nn::AlphaDropout(-1.0); }), "between 0 and 1"));
}
