// The pooling family against PyTorch: tests/fixtures/pooling_fixtures.safetensors (written by
// tools/fixtures/make_pooling_fixtures.py) holds per case the input, PyTorch's output and indices, and the
// gradient of sum(out * gout) in float64. Then the modules, float64 gradchecks and errors.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>
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


const testing::Fixtures fx("tests/fixtures/pooling_fixtures.safetensors", "make_pooling_fixtures.py");

void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  testing::check_close(got, want, what, 1e-9);
}

using Result = std::tuple<Tensor, Tensor>;  // (out, indices); indices undefined where the op has none

// Runs fn on case c's input (and extra fixture tensors) and compares out, indices and the input's gradient.
void check_case(const std::string& c, const std::function<Result(const Tensor&)>& fn) {
  INFO("case ", c);
  Tensor x = fx(c + ".x").set_requires_grad();
  auto [out, idx] = fn(x);
  check_close(out, fx(c + ".out"), c + ".out");
  if (idx.defined()) {
    CHECK(idx.dtype() == kInt64);
    check_close(idx, fx(c + ".idx"), c + ".idx");
  }
  sum(out * fx(c + ".gout")).backward();
  check_close(x.grad(), fx(c + ".grad.x"), c + ".grad.x");
}
Result values(const Tensor& t) { return {t, Tensor()}; }

}  // namespace

TEST_CASE("max pooling 1d/2d/3d matches PyTorch: values, indices (first maximum among ties) and gradients") {
  check_case("max1d", [](auto& x) { return F::max_pool1d_with_indices(x, F::MaxPool1dFuncOptions(3).stride(2).padding(1)); });
  check_case("max1d", [](auto& x) { return values(F::max_pool1d(x, F::MaxPool1dFuncOptions(3).stride(2).padding(1))); });
  check_case("max1d_ceil_dil", [](auto& x) {
    return nn::MaxPool1d(nn::MaxPool1dOptions(2).stride(2).dilation(2).ceil_mode(true))->forward_with_indices(x);
  });
  check_case("max1d_ceil_dil", [](auto& x) {
    return values(nn::MaxPool1d(nn::MaxPool1dOptions(2).stride(2).dilation(2).ceil_mode(true))(x));
  });
  check_case("max1d_unbatched", [](auto& x) { return values(nn::MaxPool1d(2)(x)); });
  check_case("max2d_idx", [](auto& x) { return F::max_pool2d_with_indices(x, F::MaxPool2dFuncOptions(3).stride(2).padding(1)); });
  check_case("max2d_idx", [](auto& x) { return values(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))(x)); });
  check_case("max2d_ties", [](auto& x) { return nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(1).padding(1))->forward_with_indices(x); });
  check_case("max2d_ties", [](auto& x) { return values(F::max_pool2d(x, F::MaxPool2dFuncOptions(3).stride(1).padding(1))); });
  check_case("max3d", [](auto& x) { return F::max_pool3d_with_indices(x, F::MaxPool3dFuncOptions(3).stride(2).padding(1)); });
  check_case("max3d", [](auto& x) { return values(nn::MaxPool3d(nn::MaxPool3dOptions(3).stride(2).padding(1))(x)); });
  check_case("max3d_ceil", [](auto& x) {
    return F::max_pool3d_with_indices(x, F::MaxPool3dFuncOptions({2, 3, 2}).stride({2, 2, 1}).dilation({1, 1, 2}).ceil_mode(true));
  });
  check_case("max3d_ties", [](auto& x) { return nn::MaxPool3d(nn::MaxPool3dOptions(2).stride(1))->forward_with_indices(x); });
}

TEST_CASE("average pooling 1d/2d/3d matches PyTorch: padding counted or not, ceil_mode, divisor_override") {
  check_case("avg1d", [](auto& x) {
    return values(nn::AvgPool1d(nn::AvgPool1dOptions(3).stride(2).padding(1).ceil_mode(true).count_include_pad(false))(x));
  });
  check_case("avg2d_divisor", [](auto& x) {
    return values(F::avg_pool2d(x, F::AvgPool2dFuncOptions(3).stride(2).padding(1).divisor_override(4)));
  });
  check_case("avg3d", [](auto& x) { return values(nn::AvgPool3d(nn::AvgPool3dOptions(3).stride(2).padding(1))(x)); });
  check_case("avg3d_nopad_ceil", [](auto& x) {
    return values(F::avg_pool3d(x, F::AvgPool3dFuncOptions({2, 3, 2}).stride({2, 2, 1}).padding({1, 1, 0}).ceil_mode(true)
                                       .count_include_pad(false)));
  });
  check_case("avg3d_divisor", [](auto& x) { return values(F::avg_pool3d(x, F::AvgPool3dFuncOptions(2).divisor_override(3))); });
}

TEST_CASE("adaptive max and average pooling 1d/2d/3d match PyTorch") {
  check_case("amax1d", [](auto& x) { return nn::AdaptiveMaxPool1d(4)->forward_with_indices(x); });
  check_case("amax1d", [](auto& x) { return values(F::adaptive_max_pool1d(x, F::AdaptiveMaxPool1dFuncOptions(4))); });
  check_case("amax2d", [](auto& x) { return F::adaptive_max_pool2d_with_indices(x, F::AdaptiveMaxPool2dFuncOptions({3, 4})); });
  check_case("amax2d", [](auto& x) { return values(nn::AdaptiveMaxPool2d(nn::AdaptiveMaxPool2dOptions({3, 4}))(x)); });
  check_case("amax3d", [](auto& x) { return nn::AdaptiveMaxPool3d(nn::AdaptiveMaxPool3dOptions({2, 3, 2}))->forward_with_indices(x); });
  check_case("aavg1d", [](auto& x) { return values(nn::AdaptiveAvgPool1d(4)(x)); });
  check_case("aavg3d", [](auto& x) { return values(F::adaptive_avg_pool3d(x, F::AdaptiveAvgPool3dFuncOptions({2, 3, 4}))); });
}

TEST_CASE("LP pooling 1d/2d/3d matches PyTorch") {
  check_case("lp1d", [](auto& x) { return values(nn::LPPool1d(nn::LPPool1dOptions(2, 3).stride(2))(x)); });
  check_case("lp2d", [](auto& x) { return values(F::lp_pool2d(x, F::LPPool2dFuncOptions(3, {2, 3}).stride({1, 2}).ceil_mode(true))); });
  check_case("lp3d", [](auto& x) { return values(nn::LPPool3d(1.5, 2)(x)); });
}

TEST_CASE("fractional max pooling 2d/3d matches PyTorch for given samples, by size and by ratio") {
  check_case("frac2d", [](auto& x) {
    return nn::FractionalMaxPool2d(nn::FractionalMaxPool2dOptions(2).output_size(nn::ExpandingArray<2>({4, 5}))
                                       ._random_samples(fx("frac2d.samples")))
        ->forward_with_indices(x);
  });
  check_case("frac2d_ratio", [](auto& x) {
    return F::fractional_max_pool2d_with_indices(
        x, F::FractionalMaxPool2dFuncOptions({3, 2}).output_ratio(nn::ExpandingArray<2, double>({0.5, 0.7}))
               ._random_samples(fx("frac2d_ratio.samples")));
  });
  check_case("frac3d", [](auto& x) {
    return F::fractional_max_pool3d_with_indices(
        x, F::FractionalMaxPool3dFuncOptions(2).output_size(nn::ExpandingArray<3>({3, 4, 3}))._random_samples(fx("frac3d.samples")));
  });
  manual_seed(5);
  // Drawn samples: the windows differ, the shape and the rule (each output a maximum of its input) do not.
  Tensor x = randn({2, 3, 9, 9}, kFloat64);
  auto [y, idx] = F::fractional_max_pool2d_with_indices(x, F::FractionalMaxPool2dFuncOptions(2).output_size(nn::ExpandingArray<2>(4)));
  CHECK(y.shape() == Shape{2, 3, 4, 4});
  check_close(y, gather(x.flatten(2), 2, idx.flatten(2)).view({2, 3, 4, 4}), "drawn samples: values at their indices");
}

TEST_CASE("max unpooling 1d/2d/3d matches PyTorch, repeated indices written once") {
  check_case("unpool1d", [](auto& x) {
    return values(nn::MaxUnpool1d(nn::MaxUnpool1dOptions(3).stride(2).padding(1))(x, fx("unpool1d.indices"), std::vector<int64_t>{9}));
  });
  check_case("unpool2d", [](auto& x) {
    return values(F::max_unpool2d(x, fx("unpool2d.indices"), F::MaxUnpool2dFuncOptions(3).stride(1).padding(1)
                                                                  .output_size(std::vector<int64_t>{1, 2, 6, 7})));
  });
  check_case("unpool3d", [](auto& x) {
    return values(nn::MaxUnpool3d(2)(x, fx("unpool3d.indices"), std::vector<int64_t>{4, 6, 5}));
  });
  // Without output_size: the pooling's default geometry, (in - 1) * stride - 2 * padding + kernel.
  CHECK(nn::MaxUnpool3d(2)(zeros({1, 2, 2, 3, 2}, kFloat64), zeros({1, 2, 2, 3, 2}, kInt64)).shape() == Shape{1, 2, 4, 6, 4});
}

TEST_CASE("pooling gradients pass float64 gradcheck") {
  using testing::gradcheck;
  manual_seed(3);
  auto r = [](Shape s) { return randn(s, kFloat64); };
  gradcheck([](auto& v) { return F::max_pool3d(v[0], F::MaxPool3dFuncOptions(2).stride(1).padding(1)); }, {r({1, 2, 3, 4, 3})});
  gradcheck([](auto& v) { return F::avg_pool3d(v[0], F::AvgPool3dFuncOptions(2).stride(1).padding(1).count_include_pad(false)); },
            {r({1, 2, 3, 4, 3})});
  gradcheck([](auto& v) { return F::adaptive_max_pool2d(v[0], F::AdaptiveMaxPool2dFuncOptions({2, 3})); }, {r({1, 2, 5, 4})});
  gradcheck([](auto& v) { return F::adaptive_avg_pool1d(v[0], F::AdaptiveAvgPool1dFuncOptions(3)); }, {r({2, 2, 7})});
  gradcheck([](auto& v) { return F::lp_pool1d(v[0], F::LPPool1dFuncOptions(3, 2)); }, {abs(r({1, 2, 6})) + 0.5});
}

TEST_CASE("pooling rejects bad input, naming the op and the sizes") {
  CHECK(contains(error_of([] { F::max_pool3d(randn({2, 3, 4}), F::MaxPool3dFuncOptions(2)); }), "max_pool3d: expected a 4-D or 5-D input"));
  CHECK(contains(error_of([] { F::max_pool1d(randn({1, 2, 5}), F::MaxPool1dFuncOptions(2).padding(2)); }),
                 "max_pool1d: pad should be at most half of effective kernel size"));
  CHECK(contains(error_of([] { F::avg_pool3d(randn({1, 1, 2, 2, 2}), F::AvgPool3dFuncOptions(3)); }), "avg_pool3d: given input size 2"));
  CHECK(contains(error_of([] { F::avg_pool3d(randn({1, 1, 4, 4, 4}), F::AvgPool3dFuncOptions(2).divisor_override(0)); }),
                 "divisor must be not zero"));
  CHECK(contains(error_of([] { F::adaptive_avg_pool3d(randn({1, 1, 4, 4, 4}), F::AdaptiveAvgPool3dFuncOptions({2, 0, 2})); }),
                 "adaptive_avg_pool3d: output_size (2, 0, 2) must be positive"));
  CHECK(contains(error_of([] { F::fractional_max_pool2d(randn({1, 1, 5, 5}), F::FractionalMaxPool2dFuncOptions(2)); }),
                 "exactly one of output_size and output_ratio"));
  CHECK(contains(error_of([] {
                   F::fractional_max_pool2d(randn({1, 1, 5, 5}), F::FractionalMaxPool2dFuncOptions(3).output_size(nn::ExpandingArray<2>(4)));
                 }),
                 "do not fit the input"));
  CHECK(contains(error_of([] {
                   F::max_unpool2d(randn({1, 1, 2, 2}), full({1, 1, 2, 2}, 16, kInt64), F::MaxUnpool2dFuncOptions(2));
                 }),
                 "max_unpool2d: Found an invalid max index: 16"));
  CHECK(contains(error_of([] { F::max_unpool1d(randn({1, 1, 2}), zeros({1, 1, 3}, kInt64), F::MaxUnpool1dFuncOptions(2)); }),
                 "max_unpool1d: Expected shape of indices to be same"));
  CHECK(contains(error_of([] { F::lp_pool2d(randn({1, 1, 4, 4}), F::LPPool2dFuncOptions(0, 2)); }), "norm_type must be non-zero"));
}
