// The reduction table on the CUDA backend (a GPU, or the emulator under --config=cudaemu): prod's
// values and gradient on the device, and the accumulation rule: the same long, badly scaled float32
// inputs as tests/reduce_test.cpp, in both kernel layouts, agree with the CPU to within one float32
// ulp (both accumulate in double and round once; only the order of the double adds differs).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/api.h"
#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace lockstep;

const Device kGpu = Device::cuda(0);

std::vector<double> values_of(const Tensor& t) {
  Tensor c = to(to(t, Device::cpu()).contiguous(), kFloat64);
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

void check_agree(const Tensor& gpu, const Tensor& cpu) {
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(gpu.shape() == cpu.shape());
  const Tensor g = to(gpu, Device::cpu()).contiguous(), c = cpu.contiguous();
  double worst = 0;
  for (int64_t i = 0; i < c.numel(); ++i) {
    const float r = c.data<float>()[i];
    const double ulp = std::nextafter(r, std::numeric_limits<float>::infinity()) - r;
    worst = std::max(worst, std::fabs(double(g.data<float>()[i]) - r) / ulp);
  }
  CHECK(worst <= 1.0);
}

}  // namespace

TEST_CASE("cuda prod: values and gradient with zeros, as on the CPU") {
  REQUIRE_DEVICE();
  Tensor a = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3}, kGpu);
  CHECK(prod(a).item<double>() == 720.0);
  CHECK(values_of(prod(a, 0)) == std::vector<double>{4, 10, 18});
  CHECK(values_of(prod(a, 1)) == std::vector<double>{6, 120});
  CHECK(values_of(prod(to(a, kInt64), 1)) == std::vector<double>{6, 120});
  CHECK(prod(zeros({0}, kGpu)).item<double>() == 1.0);
  Tensor x = tensor({0.0, 2.0, 3.0, 0.0, 0.0, 5.0, 1.0, 2.0, 3.0}, {3, 3}, kGpu).requires_grad_(true);
  sum(prod(x, 1)).backward();
  CHECK(values_of(x.grad()) == std::vector<double>{6, 0, 0, 0, 0, 0, 6, 3, 2});
  Tensor y = tensor({2.0, 0.0, 3.0}, {3}, kGpu).requires_grad_(true);
  prod(y).backward();
  CHECK(values_of(y.grad()) == std::vector<double>{0, 6, 0});
}

TEST_CASE("cuda accumulation: 10^7 badly scaled float32 values agree with the CPU in every layout") {
  REQUIRE_DEVICE();
  const int64_t kN = 10'000'000;
  manual_seed(7);
  const Tensor x = to(exp(uniform({kN}, std::log(1e-4), std::log(1e4), kFloat64)), kFloat32);
  const Tensor xg = to(x, kGpu);
  check_agree(sum(xg), sum(x));
  check_agree(mean(xg), mean(x));
  for (Shape s : {Shape{10, kN / 10}, Shape{10'000, 1000}, Shape{10, 100'000, 10}}) {
    for (int64_t d : {int64_t(0), int64_t(1)}) {
      CAPTURE(d);
      check_agree(sum(xg.view(s), d), sum(x.view(s), d));
      check_agree(mean(xg.view(s), d), mean(x.view(s), d));
    }
  }
}
