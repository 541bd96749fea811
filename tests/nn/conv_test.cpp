// The convolution family (tensor/conv2d.h): oneDNN's float32 kernels against the im2col reference in
// float64 on many configurations (forward, backward-data, backward-weight and bias, and through
// F::conv2d's autograd), float64 gradchecks of the im2col path, oneDNN's thread count, and the errors.
#include <omp.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "nn/conv.h"
#include "nn/functional.h"
#include "tensor/conv2d.h"
#include "tensor/parallel.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
namespace F = lockstep::nn::functional;
using internal::Conv2dAlgo;
using internal::Conv2dParams;
using testing::error_of;

namespace {

// One convolution: x [N, C, H, W], weight [O, C / groups, kh, kw].
struct Case {
  int64_t N, C, H, W, O, kh, kw;
  Conv2dParams p;
  bool bias;
};

std::string name(const Case& c) {
  return "x [" + std::to_string(c.N) + ", " + std::to_string(c.C) + ", " + std::to_string(c.H) + ", " +
         std::to_string(c.W) + "] O " + std::to_string(c.O) + " k " + std::to_string(c.kh) + "x" + std::to_string(c.kw) +
         " stride " + std::to_string(c.p.stride[0]) + "," + std::to_string(c.p.stride[1]) + " pad " +
         std::to_string(c.p.padding[0]) + "," + std::to_string(c.p.padding[1]) + " dil " + std::to_string(c.p.dilation[0]) +
         "," + std::to_string(c.p.dilation[1]) + " groups " + std::to_string(c.p.groups) + (c.bias ? " bias" : "");
}

Conv2dParams params(std::array<int64_t, 2> s, std::array<int64_t, 2> pad, std::array<int64_t, 2> d, int64_t g,
                    Conv2dAlgo algo = Conv2dAlgo::Auto) {
  return Conv2dParams{.stride = s, .padding = pad, .dilation = d, .groups = g, .algo = algo};
}

// ResNet-20's and cnn_fashion's layers (smaller batches), and the corners: strides that leave input
// rows unread, rectangular kernels, dilation, groups up to depthwise, a kernel as large as the input.
const std::vector<Case> kCases = {
    {2, 3, 32, 32, 16, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1), false},  // ResNet-20's stem
    {2, 16, 32, 32, 32, 3, 3, params({2, 2}, {1, 1}, {1, 1}, 1), false},
    {2, 16, 32, 32, 32, 1, 1, params({2, 2}, {0, 0}, {1, 1}, 1), false},  // projection shortcut
    {2, 64, 8, 8, 64, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1), false},
    {2, 1, 28, 28, 32, 3, 3, params({1, 1}, {0, 0}, {1, 1}, 1), true},  // cnn_fashion's conv1
    {2, 32, 13, 13, 64, 3, 3, params({1, 1}, {0, 0}, {1, 1}, 1), true},
    {1, 8, 6, 6, 8, 1, 1, params({2, 2}, {0, 0}, {1, 1}, 1), true},  // the last row and column unread
    {3, 4, 8, 9, 6, 3, 2, params({2, 1}, {1, 2}, {2, 1}, 2), true},
    {2, 6, 9, 7, 6, 3, 3, params({2, 2}, {1, 1}, {1, 1}, 3), false},
    {2, 4, 11, 11, 4, 3, 3, params({3, 3}, {0, 0}, {2, 2}, 4), true},  // depthwise, dilated
    {1, 5, 5, 5, 7, 5, 5, params({1, 1}, {2, 2}, {1, 1}, 1), true},
    {2, 3, 4, 4, 2, 4, 4, params({1, 1}, {0, 0}, {1, 1}, 1), true},  // one output position
    {2, 2, 7, 5, 3, 1, 3, params({1, 2}, {0, 1}, {1, 1}, 1), false},
};

// max |got - want| <= tol * max |want|: float32 against float64, with sums of up to a few hundred terms.
void check_rel(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-5) {
  REQUIRE_MESSAGE(got.defined(), what, ": undefined");
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs ", want.shape());
  auto g = got.to(kFloat64).contiguous().to_vector<double>(), w = want.to(kFloat64).contiguous().to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i])), scale = std::max(scale, std::abs(w[i]));
  CHECK_MESSAGE(worst <= tol * scale, what, ": max error ", worst, " of max value ", scale);
}

}  // namespace

TEST_CASE("oneDNN's kernels equal the im2col reference: forward, backward-data, backward-weight and bias") {
  manual_seed(1);
  for (const Case& c : kCases) {
    Tensor x = randn({c.N, c.C, c.H, c.W}), w = randn({c.O, c.C / c.p.groups, c.kh, c.kw});
    Tensor b = c.bias ? randn({c.O}) : Tensor();
    Conv2dParams dnnl = c.p, ref = c.p;
    dnnl.algo = Conv2dAlgo::OneDNN;
    ref.algo = Conv2dAlgo::Im2col;
    Tensor x64 = x.to(kFloat64), w64 = w.to(kFloat64), b64 = c.bias ? b.to(kFloat64) : Tensor();
    Tensor y = internal::conv2d_forward(x, w, b, dnnl);
    check_rel(y, internal::conv2d_forward(x64, w64, b64, ref), name(c) + ": forward");
    Tensor gy = randn(y.shape()), gy64 = gy.to(kFloat64);
    check_rel(internal::conv2d_backward_data(gy, w, x.shape(), dnnl),
              internal::conv2d_backward_data(gy64, w64, x.shape(), ref), name(c) + ": backward-data");
    auto got = internal::conv2d_backward_weight(gy, x, w.shape(), c.bias, dnnl);
    auto want = internal::conv2d_backward_weight(gy64, x64, w.shape(), c.bias, ref);
    check_rel(got.weight, want.weight, name(c) + ": backward-weight");
    if (c.bias) check_rel(got.bias, want.bias, name(c) + ": backward-bias");
    CHECK(!internal::conv2d_backward_weight(gy, x, w.shape(), false, dnnl).bias.defined());
  }
}

TEST_CASE("F::conv2d in float32 (oneDNN) equals float64 (im2col) through autograd, batched and unbatched") {
  manual_seed(2);
  for (const Case& c : kCases) {
    for (bool batched : {true, false}) {
      Tensor x = randn({c.N, c.C, c.H, c.W}), w = randn({c.O, c.C / c.p.groups, c.kh, c.kw});
      Tensor b = c.bias ? randn({c.O}) : Tensor();
      if (!batched) x = x.select(0, 0);
      auto run = [&](Dtype dt) {
        std::vector<Tensor> leaves{x.to(dt).detach(), w.to(dt).detach()};
        if (c.bias) leaves.push_back(b.to(dt).detach());
        for (auto& t : leaves) t.set_requires_grad(true);
        Tensor y = F::conv2d(leaves[0], leaves[1], c.bias ? leaves[2] : Tensor(), {c.p.stride[0], c.p.stride[1]},
                             {c.p.padding[0], c.p.padding[1]}, {c.p.dilation[0], c.p.dilation[1]}, c.p.groups);
        manual_seed(3);
        sum(y * randn(y.shape(), dt)).backward();
        leaves.insert(leaves.begin(), y);
        return leaves;
      };
      auto f32 = run(kFloat32), f64 = run(kFloat64);
      const std::string what = name(c) + (batched ? "" : " unbatched");
      check_rel(f32[0], f64[0], what + ": output");
      for (size_t i = 1; i < f32.size(); ++i) check_rel(f32[i].grad(), f64[i].grad(), what + ": gradient " + std::to_string(i));
    }
  }
}

TEST_CASE("F::conv2d gradients only for the inputs that need them; the bias alone, the input alone") {
  manual_seed(4);
  for (Dtype dt : {kFloat32, kFloat64}) {
    Tensor x = randn({2, 4, 6, 6}, dt), w = randn({6, 2, 3, 3}, dt), b = randn({6}, dt);
    b.set_requires_grad(true);
    sum(F::conv2d(x, w, b, 1, 1, 1, 2)).backward();
    CHECK(b.grad().to_vector<double>() == std::vector<double>(6, 2.0 * 36));  // sum over N, OH, OW
    CHECK(!w.grad().defined());
    x.set_requires_grad(true);
    Tensor y = F::conv2d(x, w, Tensor(), 2, 0, 1, 2);
    sum(y).backward();
    CHECK(x.grad().shape() == x.shape());
  }
}

TEST_CASE("gradcheck: conv2d's im2col path in float64 (stride, padding, dilation, groups, 1x1, unbatched)") {
  manual_seed(5);
  using testing::gradcheck;
  gradcheck([](auto& v) { return F::conv2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 2}, 2); },
            {randn({2, 4, 5, 6}, kFloat64), randn({4, 2, 2, 3}, kFloat64), randn({4}, kFloat64)});
  gradcheck([](auto& v) { return F::conv2d(v[0], v[1], Tensor(), 2); },
            {randn({2, 3, 5, 5}, kFloat64), randn({4, 3, 1, 1}, kFloat64)});
  gradcheck([](auto& v) { return F::conv2d(v[0], v[1], v[2], 1, 1, 1, 3); },
            {randn({3, 4, 4}, kFloat64), randn({3, 1, 3, 3}, kFloat64), randn({3}, kFloat64)});
}

TEST_CASE("oneDNN runs on lockstep's thread count: one thread means one OpenMP thread") {
  Tensor x = randn({2, 4, 8, 8}), w = randn({4, 4, 3, 3});
  const int before = get_num_threads();
  for (int n : {2, 1}) {
    set_num_threads(n);
    internal::conv2d_forward(x, w, Tensor(), params({1, 1}, {1, 1}, {1, 1}, 1, Conv2dAlgo::OneDNN));
    CHECK(omp_get_max_threads() == n);
  }
  set_num_threads(before);
}

TEST_CASE("conv2d's errors name the shapes; oneDNN refuses what it does not take") {
  CHECK(error_of([] { F::conv2d(zeros({2, 4, 8, 8}), zeros({8, 3, 3, 3})); }) ==
        "conv2d: input [2, 4, 8, 8] has 4 channels but weight [8, 3, 3, 3] with groups = 1 expects 3");
  CHECK(error_of([] { F::conv2d(zeros({1, 3, 2, 2}), zeros({8, 3, 3, 3})); }) ==
        "conv2d: input [1, 3, 2, 2] padded to [2, 2] is smaller than the kernel [3, 3] with dilation (1, 1)");
  CHECK(error_of([] { F::conv2d(zeros({2, 3, 8, 8}), zeros({8, 3, 3, 3}), zeros({4})); }) ==
        "conv2d: expected bias [8], got [4]");
  CHECK(error_of([] { F::conv2d(zeros({2, 3, 8, 8}, kFloat64), zeros({8, 3, 3, 3})); }) ==
        "conv2d: input (float64 on cpu), weight (float32 on cpu) and bias must share dtype and device");
  CHECK(error_of([] {
          internal::conv2d_forward(zeros({2, 3, 8, 8}, kFloat64), zeros({8, 3, 3, 3}, kFloat64), Tensor(),
                                   params({1, 1}, {0, 0}, {1, 1}, 1, Conv2dAlgo::OneDNN));
        }) == "conv2d: oneDNN takes non-empty tensors of one dtype on the CPU, float32 or (with AVX512-BF16) bfloat16, got "
           "float64 [2, 3, 8, 8] on cpu");
  CHECK(error_of([] { internal::conv2d_forward(zeros({2, 4, 8, 8}), zeros({8, 3, 3, 3}), Tensor(), Conv2dParams{}); }) ==
        "conv2d_forward: input [2, 4, 8, 8] and weight [8, 3, 3, 3] with groups = 1 do not match");
  // An empty batch takes the im2col path: an empty output, and zero weight gradients.
  Tensor w = randn({4, 3, 3, 3});
  w.set_requires_grad(true);
  Tensor y = F::conv2d(zeros({0, 3, 5, 5}), w, Tensor(), 1, 1);
  CHECK(y.shape() == Shape{0, 4, 5, 5});
  sum(y).backward();
  CHECK(w.grad().abs().sum().item<double>() == 0.0);
  // No output channels: im2col too.
  Tensor x = randn({2, 3, 5, 5});
  x.set_requires_grad(true);
  Tensor y0 = F::conv2d(x, zeros({0, 3, 3, 3}));
  CHECK(y0.shape() == Shape{2, 0, 3, 3});
  sum(y0).backward();
  CHECK(x.grad().abs().sum().item<double>() == 0.0);
}
