// F::interpolate and the Upsample modules against PyTorch: tests/fixtures/interpolate_fixtures.safetensors
// (written by tools/fixtures/make_interpolate_fixtures.py) holds, per case, the input, its options, PyTorch's
// float64 output and the gradient of sum(out * gout). Each case runs in float64 (to 1e-10) and float32 (to
// about 1e-5). Then hand-computed values, the modules, float64 gradchecks and the errors. Part of the
// nn_layers_test binary.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
using lockstep::testing::error_of;
namespace F = lockstep::nn::functional;

namespace {

// The fixture script's MODES, in order.
const nn::InterpolateMode kModes[] = {nn::kNearest,  nn::kNearestExact, nn::kLinear, nn::kBilinear,
                                      nn::kBicubic, nn::kTrilinear,    nn::kArea};


const testing::Fixtures fx("tests/fixtures/interpolate_fixtures.safetensors", "make_interpolate_fixtures.py");

using testing::check_close;

// The options case c was made with.
F::InterpolateFuncOptions options_of(const std::string& c) {
  auto opts = fx(c + ".opts").to_vector<int64_t>();
  auto flag = [](int64_t v) { return v < 0 ? std::optional<bool>() : std::optional<bool>(v != 0); };
  auto o = F::InterpolateFuncOptions()
               .mode(kModes[opts[0]])
               .align_corners(flag(opts[1]))
               .recompute_scale_factor(flag(opts[2]))
               .antialias(opts[3] != 0);
  if (fx.contains(c + ".size")) o.size(fx(c + ".size").to_vector<int64_t>());
  if (fx.contains(c + ".scale_factor")) o.scale_factor(fx(c + ".scale_factor").to_vector<double>());
  return o;
}

void run_case(const std::string& c, Dtype dtype, double tol) {
  Tensor x = fx(c + ".x").to(dtype).set_requires_grad();
  Tensor out = F::interpolate(x, options_of(c));
  const std::string tag = c + (dtype == kFloat64 ? "" : " (float32)");
  check_close(out, fx(c + ".out"), tag + ".out", tol);
  sum(out * fx(c + ".gout").to(dtype)).backward();
  check_close(x.grad(), fx(c + ".grad"), tag + ".grad", tol);
}

std::vector<std::string> case_names() { return fx.cases(""); }

}  // namespace

TEST_CASE("interpolate matches PyTorch's values and gradients for every mode, in float64 and float32") {
  const auto names = case_names();
  CHECK(names.size() >= 70);
  for (const auto& c : names) {
    run_case(c, kFloat64, 1e-10);
    run_case(c, kFloat32, 2e-5);
  }
}

// 16-bit inputs are resampled in float32 and rounded once: each output (and each input gradient) is
// within half a unit in the last place of the float64 result of the same rounded input and gradient,
// up to the float32 sums' rounding.
TEST_CASE("interpolate in bfloat16 and float16 rounds once, for every mode") {
  for (const auto& c : case_names()) {
    for (Dtype dtype : {kBFloat16, kFloat16}) {
      INFO(c, " ", dtype_name(dtype));
      const double half_ulp = dtype == kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      Tensor x16 = fx(c + ".x").to(dtype).set_requires_grad(), g16 = fx(c + ".gout").to(dtype);
      Tensor x64 = x16.detach().to(kFloat64).set_requires_grad();
      Tensor y16 = F::interpolate(x16, options_of(c)), y64 = F::interpolate(x64, options_of(c));
      CHECK(y16.dtype() == dtype);
      sum(y16 * g16).backward();
      sum(y64 * g16.to(kFloat64)).backward();
      auto within = [&](const Tensor& got, const Tensor& want, const Tensor& scale) {
        const double slack = 1e-5 * max(abs(scale)).item<double>();
        const Tensor err = abs(got.to(kFloat64) - want), bound = abs(want) * (half_ulp * 1.001) + slack;
        CHECK(got.shape() == want.shape());
        CHECK(sum(gt(err, bound)).item<double>() == 0);
      };
      within(y16, y64, x64.detach());
      within(x16.grad(), x64.grad(), g16.to(kFloat64));
    }
  }
}

TEST_CASE("interpolate's coordinate rules on hand-computed values") {
  Tensor x = tensor({0.0, 3.0, 6.0}, {1, 1, 3});
  // nearest x2: each pixel twice; nearest to 4 of 3: floor(o * 0.75) = 0, 0, 1, 2.
  CHECK(F::interpolate(x, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2})).to_vector<double>() ==
        std::vector<double>{0, 0, 3, 3, 6, 6});
  CHECK(F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{4})).to_vector<double>() ==
        std::vector<double>{0, 0, 3, 6});
  // nearest-exact to 4: floor((o + 0.5) * 0.75) = 0, 1, 1, 2.
  CHECK(F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{4}).mode(nn::kNearestExact))
            .to_vector<double>() == std::vector<double>{0, 3, 3, 6});
  // linear, align_corners: 5 points from 0 to 6; half-pixel: src = (o + 0.5) * 0.6 - 0.5, clamped at 0.
  auto ac = F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{5}).mode(nn::kLinear)
                                  .align_corners(true)).to_vector<double>();
  CHECK(ac == std::vector<double>{0, 1.5, 3, 4.5, 6});
  auto hp = F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{5}).mode(nn::kLinear))
                .to_vector<double>();
  CHECK(hp[0] == doctest::Approx(0));
  CHECK(hp[1] == doctest::Approx(0.4 * 3));  // src 0.4
  CHECK(hp[2] == doctest::Approx(3));        // src 1.0
  CHECK(hp[3] == doctest::Approx(1.6 * 3));  // src 1.6
  CHECK(hp[4] == doctest::Approx(6));        // src 2.2: the last pixel alone
  // area: the means of [0, 3) and [1, 3) of 4 pixels into 2 is [0, 2), [2, 4).
  Tensor y = tensor({1.0, 3.0, 5.0, 9.0}, {1, 1, 4});
  CHECK(F::interpolate(y, F::InterpolateFuncOptions().size(std::vector<int64_t>{2}).mode(nn::kArea))
            .to_vector<double>() == std::vector<double>{2, 7});
}

TEST_CASE("Upsample, UpsamplingNearest2d and UpsamplingBilinear2d are interpolate with their options") {
  Tensor x = randn({2, 3, 4, 5}, kFloat64);
  nn::Upsample up(nn::UpsampleOptions().scale_factor(std::vector<double>{2, 1.5}).mode(nn::kBilinear)
                      .align_corners(false));
  Tensor got = up(x);
  CHECK(got.shape() == Shape{2, 3, 8, 7});
  check_close(got, F::interpolate(x, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2, 1.5})
                                         .mode(nn::kBilinear).align_corners(false)), "Upsample", 0);
  nn::Upsample nearest(nn::UpsampleOptions().size(std::vector<int64_t>{6, 10}));
  check_close(nearest(x), F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{6, 10})),
              "Upsample nearest", 0);
  nn::UpsamplingNearest2d n2(nn::UpsamplingNearest2dOptions().scale_factor(std::vector<double>{2}));
  CHECK(n2(x).shape() == Shape{2, 3, 8, 10});
  nn::UpsamplingBilinear2d b2(nn::UpsamplingBilinear2dOptions().size(std::vector<int64_t>{7, 9}));
  check_close(b2(x), F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{7, 9})
                                           .mode(nn::kBilinear).align_corners(true)), "UpsamplingBilinear2d", 0);
  CHECK(up->name() == "Upsample");
  CHECK(nn::mode_name(nn::kNearestExact) == std::string("nearest-exact"));
  // The same size copies, into a new tensor.
  Tensor same = F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{4, 5}));
  check_close(same, x, "same size", 0);
  CHECK(same.data_ptr() != x.data_ptr());
  // Nearest takes integer tensors.
  Tensor i = tensor(std::vector<int64_t>{1, 2}, {1, 1, 2});
  CHECK(F::interpolate(i, F::InterpolateFuncOptions().size(std::vector<int64_t>{4})).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 1, 2, 2});
}

TEST_CASE("interpolate's gradients pass gradcheck in float64") {
  auto mode_case = [](F::InterpolateFuncOptions o, Shape shape) {
    testing::gradcheck([&](const std::vector<Tensor>& v) { return F::interpolate(v[0], o); },
                       {randn(shape, kFloat64)});
  };
  using V = std::vector<int64_t>;
  mode_case(F::InterpolateFuncOptions().size(V{5, 7}).mode(nn::kBilinear).align_corners(false), {1, 2, 3, 4});
  mode_case(F::InterpolateFuncOptions().size(V{2, 3}).mode(nn::kBilinear).align_corners(true), {1, 2, 5, 4});
  mode_case(F::InterpolateFuncOptions().size(V{5, 3}).mode(nn::kBicubic).align_corners(false), {1, 2, 3, 4});
  mode_case(F::InterpolateFuncOptions().scale_factor(std::vector<double>{1.7, 0.6}).mode(nn::kBicubic)
                .align_corners(true), {1, 1, 3, 5});
  mode_case(F::InterpolateFuncOptions().size(V{3, 2}).mode(nn::kBicubic).antialias(true), {1, 1, 7, 6});
  mode_case(F::InterpolateFuncOptions().size(V{3, 2, 3}).mode(nn::kTrilinear), {1, 1, 2, 3, 2});
  mode_case(F::InterpolateFuncOptions().size(V{3}).mode(nn::kArea), {2, 1, 7});
}

TEST_CASE("interpolate rejects bad options and shapes in PyTorch's words") {
  Tensor x = zeros({1, 2, 4, 4});
  using V = std::vector<int64_t>;
  CHECK(error_of([&] { F::interpolate(x, F::InterpolateFuncOptions().size(V{2, 2}).align_corners(true)); }) ==
        "interpolate: align_corners option can only be set with the interpolating modes: linear | bilinear | "
        "bicubic | trilinear");
  CHECK(error_of([&] { F::interpolate(x, F::InterpolateFuncOptions().mode(nn::kBilinear)); }) ==
        "interpolate: either size or scale_factor should be defined");
  CHECK(error_of([&] {
          F::interpolate(x, F::InterpolateFuncOptions().size(V{2, 2}).scale_factor(std::vector<double>{2}));
        }) == "interpolate: only one of size or scale_factor should be defined");
  CHECK(error_of([&] { F::interpolate(x, F::InterpolateFuncOptions().size(V{2, 2, 2})); }) ==
        "interpolate: Input and output must have the same number of spatial dimensions, but got input with spatial "
        "dimensions of [4, 4] and output size of [2, 2, 2]. Please provide input tensor in (N, C, d1, d2, ...,dK) "
        "format and output size in (o1, o2, ...,oK) format.");
  CHECK(error_of([&] { F::interpolate(x, F::InterpolateFuncOptions().scale_factor(std::vector<double>{2, 1.5, 3})); })
            .find("interpolate: Input and scale_factor must have the same number of spatial dimensions, but got input "
                  "with spatial dimensions of [4, 4] and scale_factor of shape [2, 1.5, 3].") == 0);
  CHECK(error_of([&] { F::interpolate(x, F::InterpolateFuncOptions().size(V{2, 2}).recompute_scale_factor(true)); }) ==
        "interpolate: recompute_scale_factor is not meaningful with an explicit size.");
  CHECK(error_of([&] { F::interpolate(x, F::InterpolateFuncOptions().size(V{2, 2}).antialias(true)); }) ==
        "interpolate: Anti-alias option is only supported for bilinear and bicubic modes (got nearest on 4D input)");
  CHECK(error_of([&] { F::interpolate(x, F::InterpolateFuncOptions().size(V{2}).mode(nn::kLinear)); }) ==
        "interpolate: Got 4D input, but linear mode needs 3D input");
  CHECK(error_of([&] { F::interpolate(zeros({1, 2, 4}), F::InterpolateFuncOptions().size(V{2}).mode(nn::kBicubic)); }) ==
        "interpolate: Got 3D input, but bicubic mode needs 4D input");
  CHECK(error_of([&] { F::interpolate(zeros({2, 4}), F::InterpolateFuncOptions().size(V{2})); }) ==
        "interpolate: Input Error: Only 3D, 4D and 5D input Tensors supported (got 2D) for the modes: nearest | "
        "linear | bilinear | bicubic | trilinear | area | nearest-exact (got nearest)");
  CHECK(error_of([&] { F::interpolate(x, F::InterpolateFuncOptions().scale_factor(std::vector<double>{0.2})); }) ==
        "interpolate: Input and output sizes should be greater than 0, but got input (H: 4, W: 4) output (H: 0, W: 0)");
  CHECK(error_of([&] {
          F::interpolate(zeros({1, 1, 2, 2, 2}, kInt64), F::InterpolateFuncOptions().size(V{3}).mode(nn::kTrilinear));
        }) == "interpolate: mode trilinear expects a floating-point input, got int64 [1, 1, 2, 2, 2]");
}
