// The convolution family in bfloat16 (tensor/conv2d.h): oneDNN's AVX512-BF16 kernels (and, on processors
// without them or under Conv2dAlgo::Im2col, the float32 computation rounded once) against float64 on
// the same bf16-rounded operands, for forward, backward-data, backward-weight and bias; and F::conv2d
// under autocast on float32 leaves: a bf16 output and float32 gradients. conv_bf16_fallback_test runs
// it all with AVX512-BF16 left out (LOCKSTEP_CPU_ISA=avx512).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/api.h"
#include "autograd/autocast.h"
#include "nn/functional.h"
#include "tensor/conv2d.h"
#include "tensor/cpu/isa.h"
#include "tests/util/test_util.h"

using namespace lockstep;
namespace F = lockstep::nn::functional;
using internal::Conv2dAlgo;
using internal::Conv2dParams;

namespace {

struct Case {
  const char* name;
  int64_t N, C, H, W, O, k;
  Conv2dParams p;
  bool bias;
};

// ResNet-20's and cnn_fashion's layers (small batches), a 1x1 projection, groups and dilation.
const std::vector<Case> kCases = {
    {"resnet stem 3->16", 2, 3, 32, 32, 16, 3, {.padding = {1, 1}}, false},
    {"resnet 16->32 stride 2", 2, 16, 32, 32, 32, 3, {.stride = {2, 2}, .padding = {1, 1}}, false},
    {"resnet 1x1 projection", 2, 16, 32, 32, 32, 1, {.stride = {2, 2}}, false},
    {"resnet 64->64 8x8", 2, 64, 8, 8, 64, 3, {.padding = {1, 1}}, false},
    {"cnn_fashion conv1 1->32", 2, 1, 28, 28, 32, 3, {}, true},
    {"cnn_fashion conv2 32->64", 2, 32, 26, 26, 64, 3, {}, true},
    {"groups 2, dilation 2", 3, 4, 9, 9, 6, 3, {.padding = {1, 2}, .dilation = {2, 2}, .groups = 2}, true},
};

// Each element of a bfloat16 result within its rounding of the exact value: |got - want| <= 2^-8 |want|
// (half a bf16 ulp, relative) + 1e-5 max |want| (float32 accumulation of up to a few thousand terms).
void check_rounded(const Tensor& got, const Tensor& want, const std::string& what) {
  REQUIRE_MESSAGE(got.defined(), what, ": undefined");
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs ", want.shape());
  auto g = got.to(kFloat64).contiguous().to_vector<double>(), w = want.to(kFloat64).contiguous().to_vector<double>();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (std::abs(g[i] - w[i]) > std::ldexp(std::abs(w[i]), -8) + 1e-5 * scale && !bad++) first = i;
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.size(), " elements off, the first at ", first, ": ", g[first],
                " vs ", w[first]);
  CHECK_MESSAGE(scale > 0, what, ": all zero");
}

Tensor bf16_randn(const Shape& s) { return randn(s).to(kBFloat16); }
Tensor f64(const Tensor& t) { return t.defined() ? t.to(kFloat64) : t; }

}  // namespace

TEST_CASE("bf16 conv2d kernels equal float64 on the rounded operands, rounded once: all three, every path") {
  const bool native = cpu::use_avx512_bf16();
  const std::string path = native ? "oneDNN's AVX512-BF16 kernels" : "the float32 fallback";
  MESSAGE("bfloat16 convolutions on " << path);
  manual_seed(11);
  for (const Case& c : kCases) {
    Tensor x = bf16_randn({c.N, c.C, c.H, c.W}), w = bf16_randn({c.O, c.C / c.p.groups, c.k, c.k});
    Tensor b = c.bias ? bf16_randn({c.O}) : Tensor();
    Conv2dParams ref = c.p;
    ref.algo = Conv2dAlgo::Im2col;
    const Tensor y64 = internal::conv2d_forward(f64(x), f64(w), f64(b), ref);
    const Tensor gy = bf16_randn(y64.shape());
    const Tensor gx64 = internal::conv2d_backward_data(f64(gy), f64(w), x.shape(), ref);
    const auto gw64 = internal::conv2d_backward_weight(f64(gy), f64(x), w.shape(), c.bias, ref);
    std::vector<Conv2dAlgo> algos{Conv2dAlgo::Auto, Conv2dAlgo::Im2col};
    if (native) algos.push_back(Conv2dAlgo::OneDNN);
    for (Conv2dAlgo algo : algos) {
      Conv2dParams p = c.p;
      p.algo = algo;
      const std::string what = std::string(c.name) + " (algo " + std::to_string(int(algo)) + ")";
      Tensor y = internal::conv2d_forward(x, w, b, p);
      CHECK(y.dtype() == kBFloat16);
      check_rounded(y, y64, what + ": forward");
      check_rounded(internal::conv2d_backward_data(gy, w, x.shape(), p), gx64, what + ": backward-data");
      auto gw = internal::conv2d_backward_weight(gy, x, w.shape(), c.bias, p);
      check_rounded(gw.weight, gw64.weight, what + ": backward-weight");
      if (c.bias) check_rounded(gw.bias, gw64.bias, what + ": backward-bias");
      // All of backward at once (autograd's call) gives the same as the kernels one by one.
      auto all = internal::conv2d_backward(gy, x, w, true, true, c.bias, p);
      CHECK(all.input.dtype() == kBFloat16);
      CHECK(all.weight.dtype() == kBFloat16);
      check_rounded(all.input, gx64, what + ": backward, input");
      check_rounded(all.weight, gw64.weight, what + ": backward, weight");
      if (c.bias) check_rounded(all.bias, gw64.bias, what + ": backward, bias");
    }
  }
}

TEST_CASE("F::conv2d under autocast on float32 leaves: a bf16 output and float32 gradients, as float64 on the "
          "rounded operands") {
  manual_seed(12);
  for (const Case& c : kCases) {
    Tensor x = randn({c.N, c.C, c.H, c.W}), w = randn({c.O, c.C / c.p.groups, c.k, c.k});
    Tensor b = c.bias ? randn({c.O}) : Tensor();
    for (Tensor* t : {&x, &w, &b})
      if (t->defined()) t->set_requires_grad(true);
    Tensor y;
    {
      autocast guard(kCPU, kBFloat16);
      y = F::conv2d(x, w, b, {c.p.stride[0], c.p.stride[1]}, {c.p.padding[0], c.p.padding[1]},
                    {c.p.dilation[0], c.p.dilation[1]}, c.p.groups);
    }
    REQUIRE(y.dtype() == kBFloat16);
    const Tensor gy = bf16_randn(y.shape());
    y.backward(gy);
    // The reference: float64 on the operands autocast rounded to bf16.
    Conv2dParams ref = c.p;
    ref.algo = Conv2dAlgo::Im2col;
    auto rounded = [](const Tensor& t) { return t.defined() ? t.detach().to(kBFloat16).to(kFloat64) : t; };
    const std::string what = c.name;
    check_rounded(y, internal::conv2d_forward(rounded(x), rounded(w), rounded(b), ref), what + ": output");
    auto want = internal::conv2d_backward(f64(gy), rounded(x), rounded(w), true, true, c.bias, ref);
    CHECK(x.grad().dtype() == kFloat32);
    CHECK(w.grad().dtype() == kFloat32);
    check_rounded(x.grad(), want.input, what + ": x.grad");
    check_rounded(w.grad(), want.weight, what + ": weight.grad");
    if (c.bias) check_rounded(b.grad(), want.bias, what + ": bias.grad");
  }
}

TEST_CASE("conv2d on mixed dtypes outside autocast is an error naming both; Conv2dAlgo::OneDNN names what it takes") {
  CHECK(testing::error_of([] { F::conv2d(zeros({1, 2, 5, 5}, kBFloat16), zeros({3, 2, 3, 3})); }) ==
        "conv2d: input (bfloat16 on cpu), weight (float32 on cpu) and bias must share dtype and device");
  if (!cpu::use_avx512_bf16())
    CHECK(testing::error_of([] {
            internal::conv2d_forward(zeros({1, 2, 5, 5}, kBFloat16), zeros({3, 2, 3, 3}, kBFloat16), Tensor(),
                                     Conv2dParams{.algo = Conv2dAlgo::OneDNN});
          }) == "conv2d: oneDNN takes non-empty tensors of one dtype on the CPU, float32 or (with AVX512-BF16) "
                "bfloat16, got bfloat16 [1, 2, 5, 5] on cpu");
}
