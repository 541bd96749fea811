// F::grid_sample against PyTorch (tests/fixtures/layer_fixtures.safetensors, "grid.*" keys, written by
// tools/fixtures/make_layer_fixtures.py): bilinear, nearest and bicubic on 4-D input, trilinear and nearest
// on 5-D, each padding mode, with and without align_corners, grid positions reaching well past the
// border; values and the gradients of input and grid in float64 (to 1e-10) and float32. Then with
// affine_grid (the identity transform reproduces the input), a gradcheck and the errors. Part of the
// nn_layers_test binary.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "nn/api.h"
#include "tests/util/fixtures.h"
#include "tests/util/gradcheck.h"
#include "tests/util/test_util.h"

using namespace lockstep;
namespace F = lockstep::nn::functional;

namespace {

const testing::Fixtures fx("tests/fixtures/layer_fixtures.safetensors", "make_layer_fixtures.py");

F::GridSampleFuncOptions options_of(const std::string& c) {
  const auto o = fx(c + ".opts").to_vector<int64_t>();
  const nn::InterpolateMode modes[] = {nn::kBilinear, nn::kNearest, nn::kBicubic};
  const F::GridSampleFuncOptions::padding_mode_t pads[] = {nn::kZeros, nn::kBorder, nn::kReflection};
  return F::GridSampleFuncOptions().mode(modes[o[0]]).padding_mode(pads[o[1]]).align_corners(o[2] != 0);
}

}  // namespace

TEST_CASE("grid_sample matches PyTorch: every mode and padding mode, align_corners, 4-D and 5-D, gradients") {
  int cases = 0;
  for (const std::string& c : fx.cases("grid.")) {
    ++cases;
    for (Dtype dtype : {kFloat64, kFloat32}) {
      INFO(c, " ", dtype_name(dtype));
      const double tol = dtype == kFloat64 ? 1e-10 : 2e-4;
      Tensor x = fx(c + ".x").to(dtype).set_requires_grad(), grid = fx(c + ".grid").to(dtype).set_requires_grad();
      Tensor out = F::grid_sample(x, grid, options_of(c));
      testing::check_close(out, fx(c + ".out"), c + ".out", tol);
      sum(out * fx(c + ".gout").to(dtype)).backward();
      testing::check_close(x.grad(), fx(c + ".grad.x"), c + ".grad.x", tol);
      const Tensor gg = grid.grad().defined() ? grid.grad() : zeros_like(grid);
      testing::check_close(gg, fx(c + ".grad.grid"), c + ".grad.grid", tol);
    }
  }
  CHECK(cases == 24);
}

TEST_CASE("grid_sample over affine_grid's identity reproduces the input; gradcheck") {
  Tensor x = randn({2, 3, 5, 4}, kFloat64);
  Tensor theta = tensor(std::vector<double>{1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0}, {2, 2, 3});
  for (bool align : {false, true}) {
    Tensor y = F::grid_sample(x, F::affine_grid(theta, {2, 3, 5, 4}, align),
                              F::GridSampleFuncOptions().align_corners(align));
    CHECK(internal::allclose(y, x, 0, 1e-12));
  }
  Tensor grid = rand({1, 3, 2, 2}, kFloat64) * 2.4 - 1.2;
  for (auto mode : {nn::kBilinear, nn::kBicubic})
    testing::gradcheck(
        [&](const std::vector<Tensor>& v) {
          return F::grid_sample(v[0], v[1], F::GridSampleFuncOptions().mode(mode).padding_mode(nn::kReflection));
        },
        {randn({1, 2, 3, 4}, kFloat64), grid});
}

TEST_CASE("grid_sample: NaN and infinite grid positions read zero under zero padding, in every mode") {
  Tensor x = randn({1, 2, 3, 4});
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  Tensor grid = tensor(std::vector<float>{static_cast<float>(nan), 0.f, static_cast<float>(inf), 0.f,
                                          static_cast<float>(-inf), static_cast<float>(nan)},
                       {1, 1, 3, 2});
  for (auto mode : {nn::kBilinear, nn::kNearest, nn::kBicubic}) {
    INFO(nn::mode_name(mode));
    Tensor y = F::grid_sample(x, grid, F::GridSampleFuncOptions().mode(mode));
    CHECK(y.shape() == Shape{1, 2, 1, 3});
    // zero padding: every tap lies outside the input (NaN counts as outside), so every output is 0
    CHECK(sum(abs(y)).item<double>() == 0);
  }
}

TEST_CASE("grid_sample rejects bad input in PyTorch's words") {
  using testing::error_of;
  Tensor x = randn({1, 2, 3, 4});
  CHECK(error_of([&] { F::grid_sample(x, randn({1, 3, 3, 3})); }).find("grid [N, H_out, W_out, 2]") !=
        std::string::npos);
  CHECK(error_of([&] { F::grid_sample(x, randn({1, 3, 3, 2}, kFloat64)); }).find("same dtype as input") !=
        std::string::npos);
  CHECK(error_of([&] {
          F::grid_sample(randn({1, 2, 3, 4, 5}), randn({1, 2, 2, 2, 3}), F::GridSampleFuncOptions().mode(nn::kBicubic));
        }).find("bicubic") != std::string::npos);
}
